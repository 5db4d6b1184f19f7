/**
 * When a stream's viewers get their sound (WHEP): with the picture of the same moment.
 *
 * The sound (the publisher's Opus passed straight through, or the soundtrack's mix) reaches the
 * node within a few ms of its capture; the picture leaves a pipeline later (decode, diffusion,
 * encode: 50–300 ms with a model on a GPU). A browser plays each track as soon as it can, so the
 * sound led the picture by that much: lips moved after the words, a beat-locked change came after
 * the beat heard. Browsers can line tracks up from RTCP sender reports (sent, SenderReport.ts), but
 * Chromium's sync moves a track's delay by a few ms a second and did not converge on a 6 fps
 * picture 150 ms behind in 30 s (measured). So the node holds each audio packet until the picture
 * captured at the same time goes out: both tracks leave with the same delay from capture, and the
 * viewer plays them together however it buffers.
 *
 * Capture time of audio: RTP time plus the least (arrival − RTP time) of the last WINDOW_MS, less
 * one packet (a packet leaves once its last sample is captured) — as CaptureClock places video.
 * Our own encoder (the soundtrack's mix) delays the sound by its lookahead: a packet's sound was
 * pushed `encoderDelayMs` before its RTP time says, and is placed that much earlier.
 * The picture's delay: the median over the last LAG_FRAMES output frames of (sent − output time),
 * output times being capture times (OutputClock). Audio is held at most MAX_HOLD_MS, and not at all
 * while no picture went out for NO_VIDEO_MS (an audio-only stream, the pipeline stalled).
 */
import { RtpArrival, rtpDelta } from './RtpArrival.ts';

/** Opus RTP clock, Hz. */
const OPUS_RATE = 48_000;
/** How far back the least-delayed audio packet that places audio on the node's clock may be, ms (as CaptureClock's video). */
const WINDOW_MS = 2000;
/** An audio packet this much later against its RTP time than the least of the window: a new source (its own RTP clock), ms. */
const JUMP_MS = 500;
/** Audio packet length assumed until two packets in a row tell, ms (Opus's usual 20). */
const DEFAULT_PACKET_MS = 20;
/** Output frames whose delay the hold follows (the median: one slow frame does not move it). */
const LAG_FRAMES = 15;
/** Longest hold, ms: a picture later than this (a stalled pipeline) is not waited for. */
export const MAX_HOLD_MS = 1000;
/** No picture out for this long: audio goes at once, ms. */
const NO_VIDEO_MS = 2000;

export interface ViewerAudioOptions {
  /** Sends one packet to the viewers (in arrival order). */
  send: (rtp: Buffer) => void;
  /** The node's monotonic clock, ms (tests may drive it). Default performance.now. */
  now?: () => number;
}

export class ViewerAudio {
  readonly #opts: ViewerAudioOptions;
  readonly #now: () => number;
  readonly #arrival = new RtpArrival(OPUS_RATE, WINDOW_MS);
  #lastTs: number | null = null;
  /** The shortest step between two packets in a row of this source, ms (null: not seen yet). */
  #packetMs: number | null = null;
  /** The current source's encoder delay, ms (push's `encoderDelayMs`). */
  #encoderDelayMs = 0;
  /** Delays (sent − output time) of the last output frames, ms. */
  readonly #lags: number[] = [];
  #lastVideoAt = -Infinity;
  /** Packets held, in arrival order, with when each goes (node clock, ms). */
  readonly #queue: { rtp: Buffer; at: number }[] = [];
  #timer: NodeJS.Timeout | null = null;

  constructor(opts: ViewerAudioOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? (() => performance.now());
  }

  /** An output frame with output time `ptsMs` (its capture time on the node's clock) went to the viewers now. */
  videoOut(ptsMs: number): void {
    const now = this.#now();
    this.#lastVideoAt = now;
    this.#lags.push(now - ptsMs);
    if (this.#lags.length > LAG_FRAMES) this.#lags.shift();
  }

  /** How long after its capture a packet goes now, ms: the picture's delay (0 without a recent picture). */
  get holdMs(): number {
    if (this.#now() - this.#lastVideoAt > NO_VIDEO_MS || this.#lags.length === 0) return 0;
    const sorted = [...this.#lags].sort((a, b) => a - b);
    return Math.max(0, Math.min(MAX_HOLD_MS, sorted[sorted.length >> 1] as number));
  }

  /**
   * One audio packet for the viewers; it goes once the picture of its capture time does. With
   * `deliver` false (nobody listens) it only moves the capture clock on. `encoderDelayMs`: how much
   * earlier than its RTP time says the packet's sound was captured (our encoder's lookahead).
   */
  push(rtp: Buffer, deliver = true, encoderDelayMs = 0): void {
    if (rtp.length < 12) return;
    const now = this.#now();
    this.#encoderDelayMs = encoderDelayMs;
    const captureMs = this.#place(rtp.readUInt32BE(4), now);
    if (!deliver) return;
    const at = captureMs + this.holdMs;
    if (this.#queue.length === 0 && at <= now) {
      this.#opts.send(rtp);
      return;
    }
    this.#queue.push({ rtp, at });
    this.#drain();
  }

  /** The RTP timestamp of audio captured at `nowMs` (node clock); null before a packet. For sender reports. */
  rtpAt(nowMs: number): number | null {
    const least = this.#arrival.least;
    if (least === undefined) return null;
    const ticks = Math.round((nowMs - least + (this.#packetMs ?? DEFAULT_PACKET_MS) + this.#encoderDelayMs) * (OPUS_RATE / 1000));
    return ((ticks % 2 ** 32) + 2 ** 32) % 2 ** 32;
  }

  /** Packets held now. */
  get held(): number {
    return this.#queue.length;
  }

  /** Drops what is held (the stream's viewers are gone). */
  close(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#queue.length = 0;
  }

  /** Sends what is due, in order, and waits for the next. */
  #drain(): void {
    const now = this.#now();
    while (this.#queue.length > 0 && (this.#queue[0] as { at: number }).at <= now) this.#opts.send((this.#queue.shift() as { rtp: Buffer }).rtp);
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    const head = this.#queue[0];
    if (!head) return;
    this.#timer = setTimeout(() => this.#drain(), Math.max(1, Math.min(MAX_HOLD_MS, head.at - now)));
    this.#timer.unref();
  }

  /** Capture time of a packet's first sample (node clock, ms). */
  #place(ts: number, now: number): number {
    const last = this.#lastTs;
    this.#lastTs = ts;
    if (last !== null) {
      const step = rtpDelta(ts, last);
      // A packet's length is the step between two in a row (2.5–120 ms for Opus); other steps are losses or a new source.
      if (step >= OPUS_RATE / 400 && step <= (OPUS_RATE * 120) / 1000) this.#packetMs = Math.min(this.#packetMs ?? Infinity, (step * 1000) / OPUS_RATE);
    }
    let rtpMs = this.#arrival.arrive(ts, now);
    // RTP time that went back against arrival (a new publisher, the soundtrack's mix starting or
    // ending: another RTP clock under the same SSRC): the old least would place it up to the window late.
    if (now - rtpMs - (this.#arrival.least as number) > JUMP_MS) {
      this.#arrival.reset();
      this.#packetMs = null;
      rtpMs = this.#arrival.arrive(ts, now);
    }
    return rtpMs + (this.#arrival.least as number) - (this.#packetMs ?? DEFAULT_PACKET_MS) - this.#encoderDelayMs;
  }
}
