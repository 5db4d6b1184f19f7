/**
 * The VP8 encoder of a stream, for viewers whose WebRTC stack has no H.264 (libwebrtc builds
 * without proprietary codecs, such as @roamhq/wrtc). It is fed the same processed frames as the
 * x264 EncoderBin and runs only while the stream has VP8 viewers (LiveStream starts and stops it).
 *
 *   appsrc (RGB W×H, leaky, 2 buffers) ! videoconvert ! I420 ! vp8enc deadline=1 (realtime)
 *     cpu-used=N lag-in-frames=0 error-resilient keyframe-max-dist=K end-usage=cbr threads=1
 *     ! video/x-vp8 ! appsink
 *
 * lag-in-frames=0 keeps it 1-in-1-out (no alt-ref look-ahead); error-resilient lets a decoder
 * resume after a lost frame without waiting for the next key frame; one thread bounds its cost to
 * one core. The frame appsink does not drop (a dropped frame corrupts the references): if Node
 * stops pulling, vp8enc blocks and the leaky appsrc drops the oldest raw frames instead.
 */
import type { Logger } from 'pino';
import { AppPipeline } from './AppPipeline.ts';
import { InvalidStateError } from './errors.ts';
import type { Frame } from './FrameProcessor.ts';
import { isVp8Keyframe } from './Vp8Packetizer.ts';

export interface EncodedVp8Frame {
  /** One VP8 frame (RFC 6386), as RFC 7741 packetizes it. */
  data: Uint8Array;
  keyframe: boolean;
  /** performance.now() when the frame reached Node. */
  atMs: number;
  /** ms from the frame push to this output (valid while the encoder is 1-in-1-out). */
  encodeMs: number;
}

export interface Vp8EncoderBinOptions {
  width: number;
  height: number;
  fps: number;
  bitrateKbps: number;
  keyIntFrames: number;
  /** libvpx speed: higher is cheaper and worse (-16…16; positive lets libvpx speed up further under load). */
  cpuUsed: number;
  /** Forced key units closer than this are merged into the pending one, ms. */
  keyUnitMinIntervalMs: number;
  logger: Logger;
  onFrame: (frame: EncodedVp8Frame) => void;
}

export class Vp8EncoderBin {
  readonly width: number;
  readonly height: number;
  readonly #bin: AppPipeline;
  #lastPushMs = 0;
  framesOut = 0;

  constructor(opts: Vp8EncoderBinOptions) {
    this.width = opts.width;
    this.height = opts.height;
    const launch =
      `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-buffers=2 ` +
      `caps="video/x-raw,format=RGB,width=${opts.width},height=${opts.height},framerate=${opts.fps}/1,pixel-aspect-ratio=1/1" ` +
      `! videoconvert ! video/x-raw,format=I420 ` +
      `! vp8enc deadline=1 cpu-used=${opts.cpuUsed} lag-in-frames=0 error-resilient=default keyframe-mode=auto ` +
      `keyframe-max-dist=${opts.keyIntFrames} end-usage=cbr target-bitrate=${opts.bitrateKbps * 1000} threads=1 ` +
      `! video/x-vp8 ! appsink name=sink sync=false max-buffers=8 drop=false`;
    this.#bin = new AppPipeline({
      launch,
      what: 'VP8 encoder',
      logger: opts.logger,
      keyUnitMinIntervalMs: opts.keyUnitMinIntervalMs,
      onSample: (buf) => {
        const atMs = performance.now();
        this.framesOut++;
        opts.onFrame({ data: buf, keyframe: isVp8Keyframe(buf), atMs, encodeMs: atMs - this.#lastPushMs });
      },
    });
    opts.logger.debug(`Vp8EncoderBin() | started [size:${opts.width}x${opts.height}]`);
  }

  /** Frames pushed. */
  get framesIn(): number {
    return this.#bin.pushed;
  }

  /** Forced key units sent to vp8enc (after coalescing). */
  get keyUnitsForced(): number {
    return this.#bin.keyUnitsForced;
  }

  /** Queues one RGB frame (oldest dropped if the encoder is 2 frames behind). */
  push(frame: Frame): void {
    if (this.#bin.closed) throw new InvalidStateError('VP8 encoder closed');
    if (frame.width !== this.width || frame.height !== this.height) {
      throw new InvalidStateError(`frame ${frame.width}x${frame.height} does not match VP8 encoder ${this.width}x${this.height}`);
    }
    this.#lastPushMs = performance.now();
    this.#bin.push(frame.data);
  }

  /** Asks vp8enc for a key frame; requests inside keyUnitMinIntervalMs of the last one are coalesced. */
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
