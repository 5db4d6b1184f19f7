/**
 * The one H.264 encoder of a stream; its access units feed every viewer.
 *
 *   appsrc (RGB W×H, leaky, 2 buffers) ! videoconvert ! I420 ! x264enc tune=zerolatency
 *     speed-preset=ultrafast bframes=0 key-int-max=N ! video/x-h264,profile=constrained-baseline
 *     ! h264parse config-interval=-1 ! byte-stream/au ! appsink
 *
 * Constrained baseline is what every WebRTC H.264 decoder takes (42e01f). h264parse repeats
 * SPS/PPS before every IDR so a viewer that starts on any keyframe can decode. The AU appsink does
 * not drop (a dropped AU corrupts the GOP): if Node stops pulling, x264enc blocks and the leaky
 * appsrc drops the oldest raw frames instead, so the bound is 2 raw frames + the appsink's 8 AUs.
 */
import type { Logger } from 'pino';
import { InvalidStateError, PipelineError } from './errors.ts';
import type { Frame } from './FrameProcessor.ts';
import { loadGst, type GstAppSink, type GstAppSrc, type GstPipeline } from './gst.ts';
import { isH264Keyframe, splitAnnexB } from './H264Packetizer.ts';

export interface EncodedAccessUnit {
  nals: Uint8Array[];
  keyframe: boolean;
  /** performance.now() when the AU reached Node. */
  atMs: number;
  /** ms from the frame push to this AU (valid while the encoder is 1-in-1-out, as zerolatency is). */
  encodeMs: number;
}

export interface EncoderBinOptions {
  width: number;
  height: number;
  fps: number;
  bitrateKbps: number;
  keyIntFrames: number;
  /** Forced key units closer than this are merged into the pending one, ms. */
  keyUnitMinIntervalMs: number;
  logger: Logger;
  onAccessUnit: (au: EncodedAccessUnit) => void;
}

export class EncoderBin {
  readonly width: number;
  readonly height: number;
  readonly #pipeline: GstPipeline;
  readonly #src: GstAppSrc;
  readonly #sink: GstAppSink;
  readonly #opts: EncoderBinOptions;
  #closed = false;
  #lastPushMs = 0;
  #lastKeyUnitMs = -Infinity;
  #keyUnitTimer: NodeJS.Timeout | undefined;
  framesIn = 0;
  accessUnitsOut = 0;
  keyUnitsForced = 0;

  constructor(opts: EncoderBinOptions) {
    this.#opts = opts;
    this.width = opts.width;
    this.height = opts.height;
    const launch =
      `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-buffers=2 ` +
      `caps="video/x-raw,format=RGB,width=${opts.width},height=${opts.height},framerate=${opts.fps}/1,pixel-aspect-ratio=1/1" ` +
      `! videoconvert ! video/x-raw,format=I420 ` +
      `! x264enc name=enc tune=zerolatency speed-preset=ultrafast bframes=0 key-int-max=${opts.keyIntFrames} bitrate=${opts.bitrateKbps} ` +
      `! video/x-h264,profile=constrained-baseline ! h264parse config-interval=-1 ` +
      `! video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=sink sync=false max-buffers=8 drop=false`;
    try {
      this.#pipeline = new (loadGst().Pipeline)(launch);
    } catch (err) {
      throw new PipelineError('encoder pipeline failed to build', { cause: err });
    }
    const src = this.#pipeline.findChild('src');
    const sink = this.#pipeline.findChild('sink');
    if (!src || !sink) throw new PipelineError('encoder pipeline lacks src/sink');
    this.#src = src;
    this.#sink = sink;
    this.#pipeline.play();
    this.#pull();
    opts.logger.debug(`EncoderBin() | started [size:${opts.width}x${opts.height}]`);
  }

  #pull(): void {
    this.#sink.pull((buf) => {
      if (this.#closed || !buf) return;
      this.#pull();
      const atMs = performance.now();
      const nals = splitAnnexB(buf);
      this.accessUnitsOut++;
      this.#opts.onAccessUnit({ nals, keyframe: isH264Keyframe(nals), atMs, encodeMs: atMs - this.#lastPushMs });
    });
  }

  /** Queues one RGB frame (oldest dropped if the encoder is 2 frames behind). */
  push(frame: Frame): void {
    if (this.#closed) throw new InvalidStateError('encoder closed');
    if (frame.width !== this.width || frame.height !== this.height) {
      throw new InvalidStateError(`frame ${frame.width}x${frame.height} does not match encoder ${this.width}x${this.height}`);
    }
    this.#lastPushMs = performance.now();
    this.framesIn++;
    this.#src.push(frame.data);
  }

  /**
   * Asks x264 for an IDR (upstream GstForceKeyUnit event from the appsink's pad). Requests inside
   * keyUnitMinIntervalMs of the last one are coalesced into one deferred request.
   */
  requestKeyUnit(): void {
    if (this.#closed || this.#keyUnitTimer) return;
    const wait = this.#lastKeyUnitMs + this.#opts.keyUnitMinIntervalMs - performance.now();
    if (wait <= 0) {
      this.#forceKeyUnit();
      return;
    }
    this.#keyUnitTimer = setTimeout(() => {
      this.#keyUnitTimer = undefined;
      this.#forceKeyUnit();
    }, wait);
  }

  #forceKeyUnit(): void {
    if (this.#closed) return;
    this.#lastKeyUnitMs = performance.now();
    this.keyUnitsForced++;
    this.#pipeline.forceKeyUnit('sink', this.keyUnitsForced);
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#keyUnitTimer);
    try {
      this.#pipeline.stop();
    } catch (err) {
      this.#opts.logger.warn({ err }, 'close() | pipeline stop failed');
    }
  }
}
