/**
 * GStreamer decode bin: in-order RTP packets from the publisher → depay → (parse) → decode →
 * videoconvert/videoscale → RGB24 at the stream's W×H → appsink (drop, 1 buffer).
 *
 *   appsrc (application/x-rtp) ! rtpvp8depay ! vp8dec
 *   appsrc (application/x-rtp) ! rtph264depay ! h264parse ! avdec_h264 max-threads=1
 *     ! videoconvert ! videoscale ! video/x-raw,format=RGB,width=W,height=H ! appsink
 *
 * Reordering happens before this bin (werift's jitter buffer in WhipSession), so the bin adds no
 * jitter-buffer latency. appsrc is leaky-downstream and bounded so a stalled decoder drops the
 * oldest packets (the next PLI recovers) instead of growing a queue. The source picture is
 * stretched to W×H (no borders, square pixels): the diffusion stage works on the full canvas.
 */
import type { Logger } from 'pino';
import { AppPipeline } from './AppPipeline.ts';
import { InvalidStateError } from './errors.ts';
import type { IngestVideoCodec } from './Sdp.ts';

export interface DecoderBinOptions {
  codec: IngestVideoCodec;
  /** RTP payload type the publisher uses (appsrc caps must match the packets). */
  payloadType: number;
  /** Output size, px. */
  width: number;
  height: number;
  /** avdec_h264 threads (1 = no frame-threading delay). */
  threads: number;
  logger: Logger;
  /** Called on the main thread with each decoded RGB24 frame (latest wins inside the appsink). */
  onFrame: (rgb: Buffer) => void;
  /** The pipeline stopped on an error (input it could not decode); the owner builds a new one. */
  onError?: (message: string) => void;
}

export class DecoderBin {
  readonly codec: IngestVideoCodec;
  readonly width: number;
  readonly height: number;
  readonly #bin: AppPipeline;

  constructor(opts: DecoderBinOptions) {
    this.codec = opts.codec;
    this.width = opts.width;
    this.height = opts.height;
    const rtpCaps =
      opts.codec === 'VP8'
        ? `application/x-rtp,media=(string)video,clock-rate=(int)90000,encoding-name=(string)VP8,payload=(int)${opts.payloadType}`
        : `application/x-rtp,media=(string)video,clock-rate=(int)90000,encoding-name=(string)H264,payload=(int)${opts.payloadType},packetization-mode=(string)1`;
    const decode =
      opts.codec === 'VP8'
        ? `rtpvp8depay wait-for-keyframe=true ! vp8dec threads=${opts.threads}`
        : `rtph264depay ! h264parse ! avdec_h264 max-threads=${opts.threads}`;
    const launch =
      `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-bytes=4000000 caps="${rtpCaps}" ` +
      `! ${decode} ! videoconvert ! videoscale add-borders=false ` +
      `! video/x-raw,format=RGB,width=${opts.width},height=${opts.height},pixel-aspect-ratio=1/1 ` +
      `! appsink name=sink max-buffers=1 drop=true sync=false`;
    this.#bin = new AppPipeline({ launch, what: `decoder [codec:${opts.codec}]`, logger: opts.logger, onSample: opts.onFrame, ...(opts.onError ? { onError: opts.onError } : {}) });
    opts.logger.debug(`DecoderBin() | started [codec:${opts.codec}] [size:${opts.width}x${opts.height}]`);
  }

  /** Frames handed to onFrame. */
  get framesOut(): number {
    return this.#bin.samples;
  }

  /** Feeds one serialized RTP packet, in sequence order. */
  push(rtp: Buffer): void {
    if (this.#bin.closed) throw new InvalidStateError('decoder closed');
    this.#bin.push(rtp);
  }

  get closed(): boolean {
    return this.#bin.closed;
  }

  close(): void {
    this.#bin.close();
  }
}
