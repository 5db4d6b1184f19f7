/**
 * GStreamer decode bin: whole frames from the publisher's session (H.264 Annex B access units or
 * VP8 frames, depacketized in Node) → parse → decode → videoconvert/videoscale → RGB24 or I420 at
 * the stream's W×H → appsink (drop, 16 buffers).
 *
 *   appsrc (video/x-vp8) ! vp8dec
 *   appsrc (video/x-h264, byte-stream, au) ! h264parse ! avdec_h264 max-threads=1
 *     ! videoconvert ! videoscale ! capsfilter name=out (RGB|I420, W×H) ! appsink
 *
 * One push per picture, not per RTP packet: every push wakes the appsrc's thread, and at ~200
 * packets/s per stream those wake-ups were the node's largest single cost after the codecs.
 * The output layout and size follow the stream: RGB while something processes frames, I420
 * (what the decoder produces, so no conversion at all) while nothing does. `configure` switches
 * either in place; the decoder keeps its reference frames, so no key frame is needed.
 *
 * appsrc is leaky-downstream and bounded so a stalled decoder drops the oldest frames (the next
 * PLI recovers) instead of growing a queue. Both ends hold a burst: when the reorder window fills
 * a gap after waiting for its retransmission (up to WHIP_REORDER_WAIT_MAX_MS, 500 ms ≈ 15 frames
 * by default), the frames behind it arrive at once and must all be decoded and handed on, in
 * order. With 8 frames in the appsrc and 1 in the appsink, 20 frames released together came out
 * as 3 (the rest dropped, the P-frames after the appsrc's drop decoded to garbage).
 * Samples reach Node in batches (the addon's callback), so the appsink holds what a batch may
 * carry. A burst is told from a backlog by its stamps (`push` stamps each frame's PTS with the time
 * it was pushed, which the decoder keeps): frames released together are pushed within a few µs and
 * all pass; frames that
 * piled up while Node was busy (an overloaded node) are spread over time, and only those within
 * STALE_AFTER_MS of the newest pass, so a late Node still works on the newest picture, not on
 * every frame it missed (the latest-frame behaviour the 1-buffer appsink gave). A source picture of another shape than W×H is
 * letterboxed (scaled to fit, square pixels, black bars; videoscale `add-borders`), never
 * stretched: a 16:9 or 4:3 camera into a 512² stream keeps its proportions, and nothing the
 * streamer framed is cut off. (Cropping would need the crop re-set on every size change; bars
 * follow the output caps by themselves.)
 */
import type { Logger } from 'pino';
import { AppPipeline } from './AppPipeline.ts';
import { InvalidStateError } from '../errors.ts';
import type { PixelFormat } from '../Frame.ts';
import type { VideoCodec } from '../VideoCodec.ts';

export interface DecoderBinOptions {
  codec: VideoCodec;
  /** Output size, px. */
  width: number;
  height: number;
  /** Output layout. Default RGB. */
  format?: PixelFormat;
  /** avdec_h264 threads (1 = no frame-threading delay). */
  threads: number;
  logger: Logger;
  /**
   * Called on the main thread with each decoded frame, in order (a backlog: only its newest, see
   * STALE_AFTER_MS), and the stamp `push` returned for the frame it was decoded from (-1: unknown).
   */
  onFrame: (frame: Buffer, stamp: number) => void;
  /** The frame given to onFrame is valid only during the call (no copy per frame); see AppPipeline. */
  borrowFrames?: boolean;
  /** Nice value of its streaming threads (see AppPipeline). */
  nice?: number;
  /** The pipeline stopped on an error (input it could not decode); the owner builds a new one. */
  onError?: (message: string) => void;
}

/** Decoded frames pushed more than this before the newest of a batch are skipped, ms (3 frames at 30 fps). */
const STALE_AFTER_MS = 100;

export class DecoderBin {
  readonly codec: VideoCodec;
  readonly #bin: AppPipeline;
  #format: PixelFormat;
  #width: number;
  #height: number;

  constructor(opts: DecoderBinOptions) {
    this.codec = opts.codec;
    this.#width = opts.width;
    this.#height = opts.height;
    this.#format = opts.format ?? 'RGB';
    const decode =
      opts.codec === 'VP8'
        ? `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-buffers=32 caps="video/x-vp8" ! vp8dec threads=${opts.threads}`
        : `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-buffers=32 caps="video/x-h264,stream-format=byte-stream,alignment=au" ` +
          `! h264parse ! avdec_h264 max-threads=${opts.threads}`;
    const launch =
      `${decode} ! videoconvert ! videoscale add-borders=true ` +
      `! capsfilter name=out caps="${this.#caps(this.#format)}" ` +
      `! appsink name=sink max-buffers=16 drop=true sync=false`;
    this.#bin = new AppPipeline({
      launch,
      what: `decoder [codec:${opts.codec}]`,
      logger: opts.logger,
      onSample: opts.onFrame,
      borrowSamples: opts.borrowFrames === true,
      nice: opts.nice ?? 0,
      staleAfterNs: STALE_AFTER_MS * 1e6,
      ...(opts.onError ? { onError: opts.onError } : {}),
    });
    opts.logger.debug(`DecoderBin() | started [codec:${opts.codec}] [size:${opts.width}x${opts.height}]`);
  }

  #caps(format: PixelFormat): string {
    return `video/x-raw,format=${format},width=${this.#width},height=${this.#height},pixel-aspect-ratio=1/1`;
  }

  get format(): PixelFormat {
    return this.#format;
  }

  get width(): number {
    return this.#width;
  }

  get height(): number {
    return this.#height;
  }

  /** Switches the output layout and size from the next decoded frame on (frames tell theirs by their byte length). */
  configure(format: PixelFormat, width: number, height: number): void {
    if ((format === this.#format && width === this.#width && height === this.#height) || this.#bin.closed) return;
    this.#format = format;
    this.#width = width;
    this.#height = height;
    this.#bin.setCaps('out', this.#caps(format));
  }

  /** Frames handed to onFrame. */
  get framesOut(): number {
    return this.#bin.samples;
  }

  /**
   * Feeds one whole frame (an H.264 access unit in Annex B, or a VP8 frame), in decode order.
   * Returns its stamp (a PTS, ns, the time of the push; -1 when refused), which the decoded frame
   * brings back to onFrame: the queues drop frames when the decoder or this thread falls behind,
   * so the order of frames out does not say which frame went in.
   */
  push(frame: Uint8Array): number {
    if (this.#bin.closed) throw new InvalidStateError('decoder closed');
    return this.#bin.push(frame, true);
  }

  get closed(): boolean {
    return this.#bin.closed;
  }

  close(): void {
    this.#bin.close();
  }
}
