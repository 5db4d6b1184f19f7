/**
 * A second, smaller encode of a stream's output (a rendition) for links that cannot carry the full
 * one: the same frames at `scale` of the size and `bitrateKbps`, with the stream encoder's key
 * frames exactly (docs/decisions/0031-renditions.md).
 *
 *   frame (copied, held) ─┐
 *   stream's AU (ptsMs, key) ─► that frame ─► EncoderBin (scaled, key frame where the AU had one) ─► onAccessUnit
 *
 * Each frame waits for the stream encoder's access unit of the same output time before it is
 * encoded here, keyed as that unit was: the rendition encodes only the frames the stream's encoder
 * did, and starts a GOP where it does, so every rendition's LL-HLS segments start on the same frame
 * and a player switches between them at any segment. The wait costs the rendition one encode of
 * latency (≈ 5 ms); the copy, one frame's bytes (the frames of a passthrough stream are lent for
 * one call only).
 */
import type { Logger } from 'pino';
import { EncoderBin, type EncodedAccessUnit } from '../gst/EncoderBin.ts';
import type { Frame } from '../Frame.ts';
import type { MediaSettings, RenditionSpec } from '../settings.ts';

export interface RenditionOptions {
  streamId: string;
  spec: RenditionSpec;
  settings: MediaSettings;
  logger: Logger;
  /** One access unit of the rendition; `slate`: the stream's unit of that time was the slate's. */
  onAccessUnit: (au: EncodedAccessUnit, slate: boolean) => void;
  /** The encoder could not be built (the stream's lastError); the other outputs go on. */
  onError: (message: string) => void;
}

export interface RenditionStatus {
  name: string;
  /** Encoded size now (0 before the first frame). */
  width: number;
  height: number;
  bitrateKbps: number;
  running: boolean;
  framesOut: number;
  /** Stream access units whose frame was no longer held (the rendition skipped them). */
  framesMissed: number;
}

/** Raw frames held for the stream's encoder to give out their units: it holds 2 + 1–2 frames. */
const HELD_FRAMES = 8;

/** Even and at least 16 px: x264 takes I420 in whole 2×2 blocks. */
function scaled(px: number, scale: number): number {
  return Math.max(16, Math.round((px * scale) / 2) * 2);
}

export class Rendition {
  readonly #opts: RenditionOptions;
  readonly #held: { frame: Frame; ptsMs: number }[] = [];
  /** Slate or live, per output time pushed and not yet out (bounded like the frames). */
  readonly #slate = new Map<number, boolean>();
  #encoder: EncoderBin | null = null;
  #failed = false;
  #framesOut = 0;
  #framesMissed = 0;
  #closed = false;

  constructor(opts: RenditionOptions) {
    this.#opts = opts;
  }

  get name(): string {
    return this.#opts.spec.name;
  }

  /** A raw frame the stream's encoder took at `ptsMs`: held until its access unit comes out. */
  frame(frame: Frame, ptsMs: number): void {
    if (this.#closed || this.#failed) return;
    if (this.#held.length >= HELD_FRAMES) this.#held.shift();
    this.#held.push({ frame: { ...frame, data: Buffer.from(frame.data) }, ptsMs });
  }

  /** The stream encoder's unit of `au.ptsMs`: its frame is encoded now, a key frame if the unit is one. */
  streamAccessUnit(au: EncodedAccessUnit, slate: boolean): void {
    if (this.#closed || this.#failed) return;
    while (this.#held.length > 0 && this.#held[0]!.ptsMs < au.ptsMs) this.#held.shift();
    const held = this.#held[0];
    if (!held || held.ptsMs !== au.ptsMs) {
      this.#framesMissed++;
      return;
    }
    this.#held.shift();
    const { frame } = held;
    if (this.#encoder && (this.#encoder.width !== frame.width || this.#encoder.height !== frame.height)) this.#stop('resized');
    // A new encoder starts with a key frame of its own: it starts where the stream's encoder made one.
    if (!this.#encoder && !au.keyframe) return;
    if (!this.#encoder && !this.#start(frame)) return;
    if (this.#slate.size >= HELD_FRAMES) this.#slate.delete(this.#slate.keys().next().value!);
    this.#slate.set(au.ptsMs, slate);
    this.#encoder?.push(frame, au.ptsMs, au.keyframe);
  }

  #start(frame: Frame): boolean {
    const { spec, settings: s, logger } = this.#opts;
    const scaleTo = { width: scaled(frame.width, spec.scale), height: scaled(frame.height, spec.scale) };
    try {
      this.#encoder = new EncoderBin({
        width: frame.width,
        height: frame.height,
        scaleTo,
        queueFrames: HELD_FRAMES,
        fps: s.outputFps,
        bitrateKbps: spec.bitrateKbps,
        // A backstop only: the stream's encoder makes a key frame at least every keyIntFrames.
        keyIntFrames: s.keyIntFrames * 4,
        keyFramesOnRequest: true,
        keyUnitMinIntervalMs: s.keyUnitMinIntervalMs,
        nice: s.encoderNice,
        logger,
        onAccessUnit: (out) => this.#onAccessUnit(out),
      });
    } catch (err) {
      this.#failed = true;
      this.#opts.onError(`rendition ${spec.name}: ${String(err)}`);
      logger.error({ err }, `startRendition() | encoder failed [streamId:${this.#opts.streamId}] [rendition:${spec.name}]`);
      return false;
    }
    logger.info(`startRendition() | started [streamId:${this.#opts.streamId}] [rendition:${spec.name}] [size:${scaleTo.width}x${scaleTo.height}] [kbps:${spec.bitrateKbps}]`);
    return true;
  }

  #onAccessUnit(au: EncodedAccessUnit): void {
    if (this.#closed) return;
    this.#framesOut++;
    const slate = this.#slate.get(au.ptsMs) ?? false;
    this.#slate.delete(au.ptsMs);
    this.#opts.onAccessUnit(au, slate);
  }

  #stop(why: string): void {
    if (!this.#encoder) return;
    this.#encoder.close();
    this.#encoder = null;
    this.#slate.clear();
    this.#opts.logger.info(`stopRendition() | stopped [streamId:${this.#opts.streamId}] [rendition:${this.#opts.spec.name}] [why:${why}]`);
  }

  status(): RenditionStatus {
    const e = this.#encoder;
    const { spec } = this.#opts;
    return {
      name: spec.name,
      width: e ? scaled(e.width, spec.scale) : 0,
      height: e ? scaled(e.height, spec.scale) : 0,
      bitrateKbps: spec.bitrateKbps,
      running: e !== null,
      framesOut: this.#framesOut,
      framesMissed: this.#framesMissed,
    };
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#held.length = 0;
    this.#stop('stream closed');
  }
}
