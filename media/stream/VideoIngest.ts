/**
 * The decode side of a stream: the publisher's depacketized frames into a DecoderBin, decoded
 * frames out with their capture time on the node's clock (CaptureClock).
 *
 *   WhipSession ─frame─► [key frame gate] ─► DecoderBin ─I420/RGB─► onFrame
 *
 * A decoder is built for the publisher's codec and starts at a key frame (P-frames without their
 * references only decode to garbage). Input it cannot take (corrupt or hostile RTP) drops it: the
 * next frame builds a new one, which starts at the next key frame asked for. So does a decoder
 * that takes frames for `decoderStallMs` and gives none out (stuck: a stream would otherwise stay
 * `connecting` with its publisher sending). Size and layout change in place (no key frame to wait for).
 */
import type { Logger } from 'pino';
import { CaptureClock } from './CaptureClock.ts';
import { DecoderBin } from '../gst/DecoderBin.ts';
import { frameBytes, type Frame, type PixelFormat } from './FrameProcessor.ts';
import type { DepacketizedFrame } from '../webrtc/H264Depacketizer.ts';
import type { MediaSettings } from '../settings.ts';
import { RateMeter, StageTimer } from '../StageTimer.ts';
import type { WhipSession } from '../webrtc/WhipSession.ts';

export interface VideoIngestOptions {
  streamId: string;
  settings: MediaSettings;
  /** The size (px) and layout frames are decoded to now (the stream's params). */
  size: () => { width: number; height: number };
  format: () => PixelFormat;
  /**
   * A decoded frame, lent for this call only; `decodedAtMs` is performance.now(), `capturedAt` ms
   * epoch; the frame's `ptsMs` is its capture time on the node's monotonic clock (CaptureClock).
   */
  onFrame: (frame: Frame, decodedAtMs: number, decodeMs: number, capturedAt: number) => void;
  /** The decoder failed (the stream's lastError). */
  onError: (message: string) => void;
  logger: Logger;
}

export class VideoIngest {
  readonly #opts: VideoIngestOptions;
  #decoder: DecoderBin | null = null;
  /** The decoder was just built: frames wait for the next key frame. */
  #needsKey = true;
  /** Decoders rebuilt after a pipeline error. */
  #restarts = 0;
  readonly #capture = new CaptureClock();
  /** performance.now() of the last frame pushed to the decoder (decode time runs from it). */
  #lastInMs = 0;
  /** performance.now() of the oldest frame pushed since the decoder last gave one out; undefined when none waits. */
  #waitingSinceMs: number | undefined;
  /** Whole frames received from the publisher (what the streamer sends, whatever the node keeps up with). */
  readonly inRate = new RateMeter();
  /** Frames decoded and handed on (below inRate when the node is overloaded). */
  readonly decodedRate = new RateMeter();
  /** ms from the last packet of a frame in to the decoded frame out. */
  readonly decodeT = new StageTimer();
  #closed = false;

  constructor(opts: VideoIngestOptions) {
    this.#opts = opts;
  }

  /** Layout the decoder hands frames in; null without a decoder. */
  get format(): PixelFormat | null {
    return this.#decoder?.format ?? null;
  }

  /** Decoders rebuilt after an error (corrupt input). */
  get restarts(): number {
    return this.#restarts;
  }

  /** A new publisher: it has its own RTP clock. */
  reset(): void {
    this.#capture.reset();
  }

  /**
   * Builds the decoder for a publisher that just attached, before its first frame: the build holds
   * the JS thread (its pipeline's start waits on streaming threads that run below it: 15 ms idle,
   * 100–300 ms on a loaded machine), better spent while its ICE and DTLS run than when its first
   * key frame arrives (everything the node sends waits meanwhile).
   */
  prepare(session: WhipSession): void {
    if (this.#closed) return;
    this.#ensureDecoder(session);
  }

  /** One frame of the current publisher `session`. */
  push(session: WhipSession, frame: DepacketizedFrame): void {
    if (this.#closed) return;
    const decoder = this.#ensureDecoder(session);
    if (this.#needsKey) {
      // A new decoder starts at a key frame: P-frames without their references only decode to garbage.
      if (!frame.keyframe) {
        session.requestKeyframe('decoder');
        return;
      }
      this.#needsKey = false;
    }
    const now = performance.now();
    const waited = now - (this.#waitingSinceMs ?? now);
    if (waited > this.#opts.settings.decoderStallMs) {
      this.#opts.logger.warn(`push() | decoder stalled, rebuilt [streamId:${this.#opts.streamId}] [waitedMs:${Math.round(waited)}]`);
      this.#dropDecoder(session, `no frame out for ${Math.round(waited)} ms`);
      return;
    }
    this.#waitingSinceMs ??= now;
    this.#lastInMs = now;
    this.inRate.mark(now);
    this.#capture.frameIn(frame.timestamp, decoder.push(frame.data));
  }

  /** A decoder for the session's codec (a new one starts at a key frame). */
  #ensureDecoder(session: WhipSession): DecoderBin {
    if (this.#decoder && this.#decoder.codec === session.codec) return this.#decoder;
    this.#decoder?.close();
    this.#decoder = this.#createDecoder(session);
    this.#needsKey = true;
    this.#waitingSinceMs = undefined;
    return this.#decoder;
  }

  /** The decoder goes; the next frame builds a new one, which starts at the key frame asked for here. */
  #dropDecoder(session: WhipSession, message: string): void {
    this.#opts.onError(`decoder: ${message}`);
    if (this.#decoder?.closed === false) this.#decoder.close();
    this.#decoder = null;
    this.#waitingSinceMs = undefined;
    this.#capture.decoderReset();
    this.#restarts++;
    session.requestKeyframe('decoder');
  }

  /** The params changed size or layout: the decoder follows in place (it keeps its references). */
  configure(): void {
    const { width, height } = this.#opts.size();
    this.#decoder?.configure(this.#opts.format(), width, height);
  }

  #createDecoder(session: WhipSession): DecoderBin {
    const { width, height } = this.#opts.size();
    const s = this.#opts.settings;
    return new DecoderBin({
      codec: session.codec,
      width,
      height,
      threads: s.decoderThreads,
      nice: s.decoderNice,
      format: this.#opts.format(),
      // Frames are encoded (copied) inside the callback; the processor path copies what it keeps.
      borrowFrames: true,
      logger: this.#opts.logger,
      onFrame: (buf, stamp) => this.#onDecoded(buf, stamp),
      // Input the decoder could not take (corrupt or hostile RTP).
      onError: (message) => this.#dropDecoder(session, message),
    });
  }

  #onDecoded(buf: Buffer, stamp: number): void {
    if (this.#closed) return;
    const now = performance.now();
    this.#waitingSinceMs = undefined;
    this.decodedRate.mark(now);
    const decodeMs = now - this.#lastInMs;
    this.decodeT.add(decodeMs);
    const { width, height } = this.#opts.size();
    // A frame's layout follows from its size (the decoder switches layout between two frames).
    const format: PixelFormat | null = buf.length === frameBytes(width, height, 'RGB') ? 'RGB' : buf.length === frameBytes(width, height, 'I420') ? 'I420' : null;
    if (format === null) return; // a bin being resized
    // Stamped with its capture time, not its decode time: the output keeps the publisher's intervals.
    const { capturedAt, ptsMs } = this.#capture.frameOut(stamp);
    this.#opts.onFrame({ width, height, data: buf, ptsMs, format }, now, decodeMs, capturedAt);
  }

  /** The publisher left: its decoder goes (the next publisher's first frame builds one). */
  stop(): void {
    this.#decoder?.close();
    this.#decoder = null;
    this.#waitingSinceMs = undefined;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.stop();
  }
}
