/**
 * The output audio of a stream with a soundtrack: blocks of 48 kHz stereo PCM on the node's
 * clock, the take mixed over the publisher's decoded audio (Soundtrack.render), handed to the
 * outputs' encoders (StreamOutputs: the AAC encoder of HLS, clips, recordings and RTMP).
 *
 *   publisher Opus RTP ─► OpusDecoderBin ─PCM─► jitter queue ─┐   (built once a packet carries sound)
 *   take PCM (Soundtrack) ────────────────────────────────────┴► mix, every 10 ms ─► onPcm
 *
 * The block clock is performance.now(): output frame n is due at `startPerf` + n/48 ms, so the
 * blocks add up to exactly the time that passed, and the outputs place the encoded frames by that
 * due time (`dueMs`), not by when they reach them: a timer that fires late (a busy event loop)
 * makes a longer block, never a gap nor a frame out of place. Only after a stall longer than
 * MAX_CATCHUP_MS are the frames past it skipped (the take moves on with the clock).
 */
import type { Logger } from 'pino';
import { OpusDecoderBin } from '../gst/OpusDecoderBin.ts';
import { opusCarriesSound } from '../webrtc/OpusSilence.ts';
import { SOUNDTRACK_SAMPLE_RATE, type Soundtrack } from './Soundtrack.ts';

/** Output the mix makes up after a stall, ms, in one block; beyond it frames are skipped (the AAC encoder's input holds ≈ 2 s). */
const MAX_CATCHUP_MS = 1000;
const FRAMES_PER_MS = SOUNDTRACK_SAMPLE_RATE / 1000;
/** Timer period of the mix, ms: short enough that a block never holds an AAC frame back long (the encoder takes any block size). */
const BLOCK_MS = 10;

export interface SoundtrackMixerOptions {
  soundtrack: Soundtrack;
  /** Publisher audio held before the mix takes it, ms (settings.soundtrackJitterMs). */
  jitterMs: number;
  /** One mixed block (interleaved stereo int16, the mixer's own buffer: valid during the call) and its first output frame (dueMs). */
  onPcm: (pcm: Int16Array, firstFrame: number) => void;
  logger: Logger;
}

export class SoundtrackMixer {
  readonly #opts: SoundtrackMixerOptions;
  readonly #timer: NodeJS.Timeout;
  /** performance.now() when output frame 0 was due. */
  readonly startPerf = performance.now();
  readonly #startWall = Date.now();
  /** Output frames made (or skipped) since start. */
  #made = 0;
  #decoder: OpusDecoderBin | null = null;
  #decoderFailed = false;
  #publisherPt: number | undefined;
  /** Decoded publisher audio not mixed yet, oldest first; #queueOffset samples of the first are used. */
  #queue: Int16Array[] = [];
  #queueOffset = 0;
  /** Samples (not frames) in #queue past the offset. */
  #queued = 0;
  /** Filling the jitter queue: publisher audio is not taken until it holds jitterMs. */
  #buffering = true;
  #out = new Int16Array(0);
  #pub = new Int16Array(0);
  #closed = false;
  /** Frames skipped after stalls (status, tests). */
  framesSkipped = 0;

  /** Output frames made (or skipped) so far: the next block starts at this frame. */
  get framesMade(): number {
    return this.#made;
  }

  /** performance.now() when output frame `frame` was due (skipped frames count: the clock went on). */
  dueMs(frame: number): number {
    return this.startPerf + frame / FRAMES_PER_MS;
  }

  constructor(opts: SoundtrackMixerOptions) {
    this.#opts = opts;
    this.#timer = setInterval(() => this.#tick(), BLOCK_MS);
  }

  get soundtrack(): Soundtrack {
    return this.#opts.soundtrack;
  }

  /**
   * The publisher's Opus payload type (undefined: none, the take plays alone); a change drops the
   * decoder. The decoder is built with the first packet that carries sound: a publisher that sends
   * only silence frames (no microphone) costs no decoder pipeline (no CPU saving was measurable).
   */
  setPublisher(payloadType: number | undefined): void {
    if (this.#closed || payloadType === this.#publisherPt) return;
    this.#publisherPt = payloadType;
    this.#decoder?.close();
    this.#decoder = null;
    this.#decoderFailed = false;
    this.#dropQueue();
  }

  /** Whether the publisher's audio is being decoded for the mix (it has carried sound). */
  get decodesPublisher(): boolean {
    return this.#decoder !== null;
  }

  /** One of the publisher's Opus RTP packets. */
  pushOpus(rtp: Uint8Array): void {
    if (this.#decoder === null) {
      const pt = this.#publisherPt;
      // Silence until now: the take alone is the same mix (the publisher adds zeros).
      if (pt === undefined || this.#decoderFailed || !opusCarriesSound(rtp)) return;
      try {
        this.#decoder = new OpusDecoderBin({ payloadType: pt, logger: this.#opts.logger, onPcm: (pcm) => this.#onPublisherPcm(pcm) });
      } catch (err) {
        // The take still plays, alone.
        this.#decoderFailed = true;
        this.#opts.logger.error({ err }, 'pushOpus() | Opus decoder failed; the soundtrack plays without the publisher');
        return;
      }
    }
    this.#decoder.push(rtp);
  }

  #onPublisherPcm(pcm: Int16Array): void {
    this.#queue.push(pcm);
    this.#queued += pcm.length;
    // Bounded: what is more than twice the jitter window behind is dropped (the decoder ran ahead of the clock).
    const max = 2 * 2 * this.#opts.jitterMs * FRAMES_PER_MS;
    while (this.#queued > max && this.#queue.length > 1) {
      const first = this.#queue.shift() as Int16Array;
      this.#queued -= first.length - this.#queueOffset;
      this.#queueOffset = 0;
    }
    if (this.#buffering && this.#queued >= 2 * this.#opts.jitterMs * FRAMES_PER_MS) this.#buffering = false;
  }

  #dropQueue(): void {
    this.#queue = [];
    this.#queueOffset = 0;
    this.#queued = 0;
    this.#buffering = true;
  }

  /** Copies `samples` of queued publisher audio into #pub (zeros past what is queued); false when none is taken. */
  #takePublisher(samples: number): boolean {
    if (this.#decoder === null || this.#buffering) return false;
    const pub = this.#pub;
    let at = 0;
    while (at < samples && this.#queue.length > 0) {
      const first = this.#queue[0] as Int16Array;
      const n = Math.min(samples - at, first.length - this.#queueOffset);
      pub.set(first.subarray(this.#queueOffset, this.#queueOffset + n), at);
      at += n;
      this.#queueOffset += n;
      this.#queued -= n;
      if (this.#queueOffset >= first.length) {
        this.#queue.shift();
        this.#queueOffset = 0;
      }
    }
    if (at < samples) {
      pub.fill(0, at, samples);
      // Ran dry: wait for the window to fill again rather than stutter packet by packet.
      this.#buffering = true;
    }
    return true;
  }

  #tick(): void {
    if (this.#closed) return;
    const due = Math.floor((performance.now() - this.startPerf) * FRAMES_PER_MS);
    let frames = due - this.#made;
    if (frames <= 0) return;
    const wallAt = (made: number) => this.#startWall + made / FRAMES_PER_MS;
    const maxFrames = MAX_CATCHUP_MS * FRAMES_PER_MS;
    if (frames > maxFrames) {
      const skip = frames - maxFrames;
      this.#opts.soundtrack.skip(skip, wallAt(this.#made));
      this.#made += skip;
      this.framesSkipped += skip;
      frames = maxFrames;
      // The publisher audio queued meanwhile is as late as the stall: start its window afresh.
      this.#dropQueue();
    }
    if (this.#out.length < frames * 2) {
      this.#out = new Int16Array(frames * 2);
      this.#pub = new Int16Array(frames * 2);
    }
    const out = this.#out.subarray(0, frames * 2);
    const publisher = this.#takePublisher(frames * 2) ? this.#pub.subarray(0, frames * 2) : null;
    this.#opts.soundtrack.render(out, frames, wallAt(this.#made), publisher);
    const first = this.#made;
    this.#made += frames;
    try {
      this.#opts.onPcm(out, first);
    } catch (err) {
      this.#opts.logger.warn({ err }, 'tick() | the mix was not taken');
    }
  }

  /** Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    this.#decoder?.close();
    this.#decoder = null;
    this.#dropQueue();
  }
}
