/**
 * The one H.264 encoder of a stream; its access units feed every H.264 viewer, LL-HLS and RTMP.
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
import { AppPipeline } from './AppPipeline.ts';
import { InvalidStateError } from './errors.ts';
import type { Frame } from './FrameProcessor.ts';
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
  readonly #bin: AppPipeline;
  #lastPushMs = 0;
  accessUnitsOut = 0;

  constructor(opts: EncoderBinOptions) {
    this.width = opts.width;
    this.height = opts.height;
    const launch =
      `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-buffers=2 ` +
      `caps="video/x-raw,format=RGB,width=${opts.width},height=${opts.height},framerate=${opts.fps}/1,pixel-aspect-ratio=1/1" ` +
      `! videoconvert ! video/x-raw,format=I420 ` +
      `! x264enc name=enc tune=zerolatency speed-preset=ultrafast bframes=0 key-int-max=${opts.keyIntFrames} bitrate=${opts.bitrateKbps} ` +
      `! video/x-h264,profile=constrained-baseline ! h264parse config-interval=-1 ` +
      `! video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=sink sync=false max-buffers=8 drop=false`;
    this.#bin = new AppPipeline({
      launch,
      what: 'encoder',
      logger: opts.logger,
      keyUnitMinIntervalMs: opts.keyUnitMinIntervalMs,
      onSample: (buf) => {
        const atMs = performance.now();
        const nals = splitAnnexB(buf);
        this.accessUnitsOut++;
        opts.onAccessUnit({ nals, keyframe: isH264Keyframe(nals), atMs, encodeMs: atMs - this.#lastPushMs });
      },
    });
    opts.logger.debug(`EncoderBin() | started [size:${opts.width}x${opts.height}]`);
  }

  /** Frames pushed. */
  get framesIn(): number {
    return this.#bin.pushed;
  }

  /** Forced key units sent to x264 (after coalescing). */
  get keyUnitsForced(): number {
    return this.#bin.keyUnitsForced;
  }

  /** Queues one RGB frame (oldest dropped if the encoder is 2 frames behind). */
  push(frame: Frame): void {
    if (this.#bin.closed) throw new InvalidStateError('encoder closed');
    if (frame.width !== this.width || frame.height !== this.height) {
      throw new InvalidStateError(`frame ${frame.width}x${frame.height} does not match encoder ${this.width}x${this.height}`);
    }
    this.#lastPushMs = performance.now();
    this.#bin.push(frame.data);
  }

  /** Asks x264 for an IDR; requests inside keyUnitMinIntervalMs of the last one are coalesced. */
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
