/**
 * The VP8 output branch of a stream, for WebRTC stacks without H.264 (libwebrtc builds such as
 * @roamhq/wrtc). It gets the same frames as the H.264 encoder, but its encoder exists only while
 * VP8 viewers do: it starts with the first frame pushed while one is attached and stops when the
 * last one leaves (or the frames stop), so streams without VP8 viewers pay nothing for it. Its
 * encoder has its own 2-frame leaky appsrc, so a slow VP8 encode drops VP8 frames only.
 *
 *   frame ─► Vp8EncoderBin ─► Vp8Packetizer (once) ─► onPackets (every VP8 viewer)
 */
import type { Logger } from 'pino';
import type { Frame } from '../Frame.ts';
import type { MediaSettings } from '../settings.ts';
import { StageTimer, type StageStats } from '../StageTimer.ts';
import { Vp8EncoderBin, type EncodedVp8Frame } from '../gst/Vp8EncoderBin.ts';
import { Vp8Packetizer } from './Vp8Packetizer.ts';

/** The VP8 output branch of a stream (for viewers without H.264). */
export interface Vp8BranchStatus {
  /** The VP8 encoder exists: VP8 viewers are attached and processed frames reach it. */
  running: boolean;
  /** Times the encoder was started since the stream was created (it stops with its last viewer). */
  starts: number;
  /** VP8 frames encoded since the stream was created. */
  framesOut: number;
  /** Forced key frames of the running encoder (VP8 viewers' joins and PLI/FIR). */
  keyUnitsForced: number;
  /** ms from frame push to encoded frame (rolling window). */
  encode?: StageStats;
}

export interface Vp8BranchOptions {
  streamId: string;
  settings: MediaSettings;
  /** SSRC and payload type the packetizer writes (viewers that negotiated another get a copy). */
  ssrc: number;
  payloadType: number;
  /** The stream's RTP time (90 kHz) of an output time (ms, performance.now() clock): the same clock as H.264. */
  rtpTimestamp: (ptsMs: number) => number;
  /** VP8 viewers attached now: the branch runs only while there are some. */
  viewers: () => number;
  /** One encoded frame's packets, for every VP8 viewer. */
  onPackets: (packets: Buffer[], keyframe: boolean) => void;
  /** The encoder could not be built (the stream's lastError). */
  onError: (message: string) => void;
  logger: Logger;
}

export class Vp8Branch {
  readonly #opts: Vp8BranchOptions;
  readonly #logger: Logger;
  #encoder: Vp8EncoderBin | null = null;
  readonly #packetizer: Vp8Packetizer;
  #starts = 0;
  /** The encoder failed to build: no retry (per frame) until the VP8 viewers are gone. */
  #failed = false;
  #framesOut = 0;
  readonly #encodeT = new StageTimer();
  #closed = false;

  constructor(opts: Vp8BranchOptions) {
    this.#opts = opts;
    this.#logger = opts.logger;
    this.#packetizer = new Vp8Packetizer({ ssrc: opts.ssrc, payloadType: opts.payloadType, maxPayload: opts.settings.rtpMaxPayload });
  }

  /** The running encoder (null while the branch is stopped), for key unit requests. */
  get encoder(): Vp8EncoderBin | null {
    return this.#encoder;
  }

  /**
   * Feeds the branch, starting it (or restarting it at a new size) while VP8 viewers exist.
   * `ptsMs`: the frame's time on the stream's output timeline (its RTP time follows it).
   */
  push(frame: Frame, ptsMs: number): void {
    if (this.#closed || this.#failed || this.#opts.viewers() === 0) return;
    if (this.#encoder && (this.#encoder.width !== frame.width || this.#encoder.height !== frame.height)) this.stop('resized');
    if (!this.#encoder) {
      const s = this.#opts.settings;
      try {
        this.#encoder = new Vp8EncoderBin({
          width: frame.width,
          height: frame.height,
          fps: s.outputFps,
          bitrateKbps: s.videoBitrateKbps,
          keyIntFrames: s.vp8KeyIntFrames,
          cpuUsed: s.vp8CpuUsed,
          keyUnitMinIntervalMs: s.keyUnitMinIntervalMs,
          nice: s.encoderNice,
          logger: this.#logger,
          onFrame: (f) => this.#onFrame(f),
        });
      } catch (err) {
        // H.264 viewers, HLS and RTMP go on; VP8 viewers stay held.
        this.#failed = true;
        this.#opts.onError(`vp8: ${String(err)}`);
        this.#logger.error({ err }, `encodeVp8() | VP8 encoder failed [streamId:${this.#opts.streamId}]`);
        return;
      }
      this.#starts++;
      this.#logger.info(`encodeVp8() | VP8 branch started [streamId:${this.#opts.streamId}] [size:${frame.width}x${frame.height}]`);
    }
    this.#encoder.push(frame, ptsMs);
  }

  /** Stops the encoder (the next frame pushed while VP8 viewers exist starts it again). */
  stop(why: string): void {
    if (!this.#encoder) return;
    this.#encoder.close();
    this.#encoder = null;
    this.#logger.info(`stopVp8() | VP8 branch stopped [streamId:${this.#opts.streamId}] [why:${why}]`);
  }

  /** The last VP8 viewer left: the encoder stops, and a failed one may be tried again by the next. */
  viewersGone(): void {
    this.stop('last VP8 viewer left');
    this.#failed = false;
  }

  #onFrame(f: EncodedVp8Frame): void {
    if (this.#closed) return;
    this.#framesOut++;
    if (f.encodeMs >= 0) this.#encodeT.add(f.encodeMs);
    const packets = this.#packetizer.packetize(f.data, this.#opts.rtpTimestamp(f.ptsMs));
    this.#opts.onPackets(packets, f.keyframe);
  }

  status(): Vp8BranchStatus {
    return {
      running: this.#encoder !== null,
      starts: this.#starts,
      framesOut: this.#framesOut,
      keyUnitsForced: this.#encoder?.keyUnitsForced ?? 0,
      encode: this.#encodeT.summary(),
    };
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.stop('stream closed');
  }
}
