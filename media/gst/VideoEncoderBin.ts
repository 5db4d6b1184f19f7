/**
 * What the stream's video encoders share (x264 EncoderBin, Vp8EncoderBin): RGB or I420 frames of
 * one size in through a leaky 2-buffer appsrc and videoconvert to I420 (a no-op for I420 frames:
 * the appsrc's caps follow each frame's layout), the codec's elements, encoded
 * samples out of a non-dropping appsink (a dropped sample corrupts the references: if Node stops
 * pulling the encoder blocks and the appsrc drops the oldest raw frames instead), rate-limited
 * forced key units, and which push each encoded sample is (every push is stamped with a PTS the
 * encoder carries to its output), with the push→output latency of that very frame and the output
 * time its owner gave the frame (the stream's output timeline, OutputClock).
 */
import type { Logger } from 'pino';
import { AppPipeline } from './AppPipeline.ts';
import { InvalidStateError } from '../errors.ts';
import { frameBytes, type Frame, type PixelFormat } from '../Frame.ts';

export interface VideoEncoderBinOptions {
  width: number;
  height: number;
  fps: number;
  /** Forced key units closer than this are merged into the pending one, ms. */
  keyUnitMinIntervalMs: number;
  /** Nice value of its streaming threads (see AppPipeline). Default 0. */
  nice?: number;
  /** Encoded size when it differs from the frames' (a rendition): scaled after videoconvert. Default the frames' size. */
  scaleTo?: { width: number; height: number };
  /**
   * Raw frames the appsrc holds before it drops the oldest. Default 2 (the stream's encoder: late
   * frames are worth nothing); a rendition takes more, since each frame it drops shifts its parts
   * against the stream's other renditions.
   */
  queueFrames?: number;
  logger: Logger;
}

/** Pushed frames remembered while waiting for their output (far above what the encoder holds). */
const MAX_IN_FLIGHT = 64;

export abstract class VideoEncoderBin {
  readonly width: number;
  readonly height: number;
  readonly #bin: AppPipeline;
  readonly #what: string;
  readonly #fps: number;
  #format: PixelFormat = 'RGB';
  /**
   * Frames pushed and not yet out, oldest first: their PTS (ns), push time (performance.now()) and
   * output time (ms). An output older than the head means the head was dropped (leaky appsrc): it goes.
   */
  readonly #inFlight: { pts: number; atMs: number; ptsMs: number }[] = [];
  /** Output time of the last sample, ms (a sample whose push is unknown gets 1 ms more: never backwards). */
  #lastPtsMs = 0;

  /**
   * `encode` is the launch fragment from I420 to the encoded caps (ending before the appsink);
   * `onSample` gets each encoded sample with its arrival time, the ms since its frame's push (-1:
   * unknown), its PTS, the number `push` returned for that frame (-1: unknown), and the output
   * time `push` was given for that frame (ms).
   */
  protected constructor(
    opts: VideoEncoderBinOptions,
    what: string,
    encode: string,
    onSample: (buf: Buffer, atMs: number, encodeMs: number, pts: number, ptsMs: number) => void,
  ) {
    this.width = opts.width;
    this.height = opts.height;
    this.#what = what;
    this.#fps = opts.fps;
    const scale = opts.scaleTo ? ` ! videoscale ! video/x-raw,width=${opts.scaleTo.width},height=${opts.scaleTo.height},pixel-aspect-ratio=1/1` : '';
    const launch =
      `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-buffers=${opts.queueFrames ?? 2} caps="${this.#caps('RGB')}" ` +
      `! videoconvert ! video/x-raw,format=I420${scale} ! ${encode} ! appsink name=sink sync=false max-buffers=8 drop=false`;
    this.#bin = new AppPipeline({
      launch,
      what,
      logger: opts.logger,
      keyUnitMinIntervalMs: opts.keyUnitMinIntervalMs,
      nice: opts.nice ?? 0,
      onSample: (buf, pts) => {
        const atMs = performance.now();
        const q = this.#inFlight;
        while (q.length > 0 && q[0]!.pts < pts) q.shift();
        const pushed = q.length > 0 && q[0]!.pts === pts ? q.shift() : undefined;
        this.#lastPtsMs = pushed ? pushed.ptsMs : this.#lastPtsMs + 1;
        onSample(buf, atMs, pushed ? atMs - pushed.atMs : -1, pts, this.#lastPtsMs);
      },
    });
    opts.logger.debug(`${new.target.name}() | started [size:${opts.width}x${opts.height}]`);
  }

  #caps(format: PixelFormat): string {
    return `video/x-raw,format=${format},width=${this.width},height=${this.height},framerate=${this.#fps}/1,pixel-aspect-ratio=1/1`;
  }

  /** Frames pushed. */
  get framesIn(): number {
    return this.#bin.pushed;
  }

  /** Forced key units sent to the encoder (after coalescing). */
  get keyUnitsForced(): number {
    return this.#bin.keyUnitsForced;
  }

  /**
   * Queues one frame (oldest dropped if the encoder is 2 frames behind) and returns its PTS: the
   * sample it becomes is handed to `onSample` with this number (strictly increasing; -1: refused)
   * and with `ptsMs`, its time on the stream's output timeline (ms; default the frame's own).
   * `keyUnit`: this very frame is encoded as a key unit (not coalesced; see requestKeyUnit).
   */
  push(frame: Frame, ptsMs = frame.ptsMs, keyUnit = false): number {
    if (this.#bin.closed) throw new InvalidStateError(`${this.#what} closed`);
    const format = frame.format ?? 'RGB';
    if (frame.width !== this.width || frame.height !== this.height || frame.data.length !== frameBytes(this.width, this.height, format)) {
      throw new InvalidStateError(`frame ${frame.width}x${frame.height} ${format} does not match ${this.#what} ${this.width}x${this.height}`);
    }
    if (format !== this.#format) {
      // The appsrc stamps the new caps on the next buffer; videoconvert renegotiates, the encoder does not.
      this.#format = format;
      this.#bin.setCaps('src', this.#caps(format));
    }
    const pts = this.#bin.push(frame.data, true, keyUnit);
    if (pts >= 0) {
      // Bounded: the appsrc holds 2 frames and the encoder 1–2, so entries only pile up if the
      // encoder stopped giving output (its error closes the stream's encoder anyway).
      if (this.#inFlight.length >= MAX_IN_FLIGHT) this.#inFlight.shift();
      this.#inFlight.push({ pts, atMs: performance.now(), ptsMs });
    }
    return pts;
  }

  /** Asks for a key frame; requests inside keyUnitMinIntervalMs of the last one are coalesced. */
  requestKeyUnit(): void {
    this.#bin.requestKeyUnit();
  }

  get closed(): boolean {
    return this.#bin.closed;
  }

  close(): void {
    this.#bin.close();
  }
}
