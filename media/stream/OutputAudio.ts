/**
 * A stream's output audio, for every reader of its hub: the publisher's Opus as it comes, the AAC
 * encoder the readers that want AAC share, and the soundtrack's mix when one is set.
 *
 *   Opus RTP ─┬► hub.opus (WHEP viewers)
 *             └► AacEncoderBin ─AAC─► hub.aac (LL-HLS, recording, RTMP)
 *   with a soundtrack: Opus RTP ─► SoundtrackMixer (take + publisher) ─PCM─┬► AacEncoderBin ─AAC─► hub.aac
 *                                                                           └► OpusEncoderBin ─Opus RTP─► hub.opus
 *
 * The AAC encoder runs once per publisher session, and only while some reader wants AAC; the mix's
 * Opus encoder only while some reader wants the mix as Opus.
 */
import type { Logger } from 'pino';
import { AacEncoderBin } from '../gst/AacEncoderBin.ts';
import { OPUS_ENCODER_DELAY_MS, OpusEncoderBin } from '../gst/OpusEncoderBin.ts';
import type { MediaSettings } from '../settings.ts';
import { opusCarriesSound } from '../webrtc/OpusSilence.ts';
import { EncoderInputClock } from './EncoderInputClock.ts';
import type { Soundtrack } from './Soundtrack.ts';
import { SoundtrackMixer } from './SoundtrackMixer.ts';
import type { StreamHub } from './StreamHub.ts';

/** Samples per channel in one AAC-LC frame. */
const AAC_FRAME_SAMPLES = 1024;

export interface OutputAudioOptions {
  streamId: string;
  settings: MediaSettings;
  /** The readers: what they want decides which encoders run; what the encoders give goes to them. */
  hub: StreamHub;
  /** The publisher's Opus payload type; undefined without a publisher (or without its audio). */
  audioPayloadType: () => number | undefined;
  /** An encoder failed in a way the stream reports (its lastError). */
  onError: (message: string) => void;
  logger: Logger;
}

export class OutputAudio {
  readonly #opts: OutputAudioOptions;
  readonly #logger: Logger;
  readonly #hub: StreamHub;
  #aac: AacEncoderBin | null = null;
  /** With a soundtrack: when the AAC encoder's input samples were due (the mix's clock). */
  #aacClock: EncoderInputClock | null = null;
  /** The song mixed into the output audio (null: the publisher's audio alone, as it comes). */
  #soundtrack: Soundtrack | null = null;
  /** Runs while a soundtrack is set and a reader takes audio: the AAC encoder and the mix's Opus encoder then take its PCM. */
  #mixer: SoundtrackMixer | null = null;
  /** The mix as Opus RTP (only while a reader wants it). */
  #opus: OpusEncoderBin | null = null;
  /** The publisher has sent an Opus packet that carries sound (before it, only silence frames or none). */
  #audioHeard = false;
  /** What the readers were last told: whether AAC frames come (told again when it changes; null: tell them). */
  #aacTold: boolean | null = false;
  #closed = false;

  constructor(opts: OutputAudioOptions) {
    this.#opts = opts;
    this.#logger = opts.logger;
    this.#hub = opts.hub;
  }

  /** The readers changed (one joined or left): they are told again whether AAC frames come, then the encoders follow their demand. */
  readersChanged(): void {
    this.#aacTold = null;
    this.sync();
  }

  /**
   * Runs the AAC encoder only while some reader wants AAC (an RTMP push, a recording, HLS players
   * of the last 30 s). It costs ≈ 1–2 % of a core, so streams nobody watches over HLS don't pay for
   * it; readers fill silence until it runs.
   */
  sync(): void {
    const audio = this.#opts.audioPayloadType();
    const wanted = !this.#closed && this.#hub.wantsAac;
    if (this.#soundtrack) {
      this.#syncMix(wanted, audio);
      return;
    }
    // Silence frames alone start no encoder (media/webrtc/OpusSilence.ts): the readers fill silence anyway.
    const sound = this.#audioHeard || this.#opts.settings.aacForSilence;
    if (audio === undefined || !wanted || !sound) {
      this.#closeAac();
      return;
    }
    if (this.#aac) return;
    try {
      this.#aac = new AacEncoderBin({
        payloadType: audio,
        bitrateBps: this.#opts.settings.aacBitrateBps,
        logger: this.#logger,
        onFrame: (frame, atMs) => this.#hub.aac(frame, atMs),
      });
    } catch (err) {
      // Outputs go on video-only (silence-padded) rather than failing the stream.
      this.#opts.onError(`aac: ${String(err)}`);
      this.#logger.error({ err }, `sync() | AAC encoder failed [streamId:${this.#opts.streamId}]`);
    }
    this.#tellAac();
  }

  /**
   * With a soundtrack the mix runs while a reader takes audio, whether or not the publisher sends
   * any (the take alone then): the AAC encoder while a reader wants AAC, the Opus encoder while a
   * reader wants the mix as Opus (WHEP viewers with audio).
   */
  #syncMix(aacWanted: boolean, audio: number | undefined): void {
    const soundtrack = this.#soundtrack as Soundtrack;
    const opusWanted = !this.#closed && this.#hub.wantsOpus;
    if (!aacWanted && !opusWanted) {
      this.#closeMix();
      return;
    }
    try {
      this.#mixer ??= new SoundtrackMixer({
        soundtrack,
        jitterMs: this.#opts.settings.soundtrackJitterMs,
        logger: this.#logger,
        onPcm: (pcm, first) => {
          const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
          if (this.#aac && !this.#aac.closed) {
            this.#aacClock?.fed(first, pcm.length / 2);
            this.#aac.push(bytes);
          }
          if (this.#opus && !this.#opus.closed) this.#opus.push(bytes);
        },
      });
      const mixer = this.#mixer;
      if (aacWanted && !this.#aac) {
        // AAC frame n holds the encoder's input samples from n·1024 on (it neither drops nor adds
        // any): it is placed at their due time, so a busy event loop delays frames without moving
        // them, and a stretch the mix skipped after a long stall moves the frames after it on.
        const clock = new EncoderInputClock((frame) => mixer.dueMs(frame));
        this.#aacClock = clock;
        let n = 0;
        this.#aac = new AacEncoderBin({
          payloadType: 'pcm',
          bitrateBps: this.#opts.settings.aacBitrateBps,
          logger: this.#logger,
          onFrame: (frame) => this.#hub.aac(frame, clock.dueAt(AAC_FRAME_SAMPLES * n++)),
        });
      } else if (!aacWanted && this.#aac) {
        this.#aac.close();
        this.#aac = null;
      }
      if (opusWanted && !this.#opus) {
        this.#opus = new OpusEncoderBin({
          payloadType: 111,
          bitrateBps: 96_000,
          mtu: this.#opts.settings.rtpMaxPayload,
          logger: this.#logger,
          onRtp: (rtp) => this.#hub.opus(rtp, OPUS_ENCODER_DELAY_MS),
        });
      } else if (!opusWanted && this.#opus) {
        this.#opus.close();
        this.#opus = null;
      }
    } catch (err) {
      this.#opts.onError(`soundtrack: ${String(err)}`);
      this.#logger.error({ err }, `syncMix() | soundtrack encoder failed [streamId:${this.#opts.streamId}]`);
      this.#closeMix();
    }
    this.#mixer?.setPublisher(audio);
    this.#tellAac();
  }

  #closeMix(): void {
    this.#mixer?.close();
    this.#mixer = null;
    this.#opus?.close();
    this.#opus = null;
    this.#closeAac();
  }

  /**
   * Sets (or clears, null) the song mixed into the output audio. The encoder running now goes:
   * the next one takes the mix (or the publisher's Opus again) from the next sync on.
   */
  setSoundtrack(soundtrack: Soundtrack | null): void {
    if (this.#closed) return;
    this.#closeMix();
    this.#soundtrack = soundtrack;
    this.sync();
  }

  /** The publisher's audio ends (it left, or another one takes over): its AAC encoder goes, and the next must be heard again. */
  endPublisherAudio(): void {
    this.#audioHeard = false;
    // A soundtrack goes on alone, without a gap.
    if (this.#mixer) this.#mixer.setPublisher(undefined);
    else this.#closeAac();
  }

  /** The AAC encoder belongs to one publisher's audio (or to the soundtrack's mix): it goes with it (the readers fill silence). */
  #closeAac(): void {
    this.#aac?.close();
    this.#aac = null;
    this.#tellAac();
  }

  /**
   * An Opus RTP packet of a publisher session; `current`: it is the stream's publisher now (a
   * replaced one's last packets reach viewers only). With a soundtrack the readers get the mix
   * instead.
   */
  pushPublisherRtp(rtp: Buffer, current: boolean): void {
    if (!this.#opus) this.#hub.opus(rtp, 0);
    if (!current) return;
    if (this.#mixer) {
      this.#mixer.pushOpus(rtp);
      return;
    }
    if (!this.#audioHeard && opusCarriesSound(rtp)) {
      this.#audioHeard = true;
      this.sync();
    }
    this.#aac?.push(rtp);
  }

  /** Tells the readers whether AAC frames come, when that changed (sync runs every 2 s and on every demand change). */
  #tellAac(): void {
    const running = this.#aac !== null;
    if (running === this.#aacTold) return;
    this.#aacTold = running;
    this.#hub.aacRunning(running);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#closeMix();
  }
}
