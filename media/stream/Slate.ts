/**
 * The picture a stream's outputs carry while no live frame comes (decision 0011): before the first
 * publish, between a publisher's drop and its reconnect, and through any output gap (a processor
 * that stopped serving). WHEP viewers, LL-HLS players and RTMP pushes keep their sessions and get
 * this frame, encoded by the stream's one encoder at `slateFps`, so nobody has to reconnect.
 *
 * - `last_frame`: the last live output frame, desaturated and dimmed (luma mapped into
 *   Y 64…146 of the limited range, chroma neutral), so viewers see where the stream stopped and that
 *   it is not live;
 * - `plain`: a uniform dark grey (Y 64) when there is no last frame (before the first publish, or
 *   the stream's size changed since). It carries nothing of any stream.
 *
 * Frames are I420 (the encoder's own layout: no colour conversion per slate frame), built once per
 * slate episode and pushed as is: a static picture costs x264 almost nothing after its key frame.
 */
import { frameBytes, type Frame } from './FrameProcessor.ts';
import type { SlateImage } from './SlateImage.ts';

/**
 * - `image`: the stream's own slate image (set through the API), fitted to the stream's size;
 * - `last_frame`: the last live output frame, greyed;
 * - `plain`: dark grey (no live frame of this size yet).
 */
export type SlateSource = 'image' | 'last_frame' | 'plain';

/** Y of the plain slate and the floor of the greyed one (limited range 16…235). */
const SLATE_Y_FLOOR = 64;
/** Greyed luma = floor + (Y − 16) × GREY_GAIN: keeps the picture readable, clearly dimmed. */
const GREY_GAIN = 0.375;
const NEUTRAL_CHROMA = 128;

/**
 * Holds a copy of the newest live frame (at most one copy every `copyEveryMs`, into a reused buffer:
 * no allocation per frame) and builds slate frames from it.
 */
export class Slate {
  readonly #copyEveryMs: number;
  #last: Frame | null = null;
  #lastCopyAtMs = -Infinity;
  #image: SlateImage | null = null;

  /** `copyEveryMs`: how stale the greyed frame may be, ms (a copy of an RGB 512² frame is ≈ 0.1 ms). */
  constructor(copyEveryMs = 200) {
    this.#copyEveryMs = copyEveryMs;
  }

  /** Shows this stream-defined image instead of the greyed last frame whenever it is decoded. */
  useImage(image: SlateImage): void {
    this.#image = image;
  }

  /**
   * Whether a frame built before is out of date (the stream's image appeared, changed or went):
   * looks at the image file now and then (see SlateImage), so call it at the slate's rate.
   */
  stale(width: number, height: number): boolean {
    if (!this.#image) return false;
    this.#image.frame(width, height);
    return this.#image.takeChanged();
  }

  /** Remembers a live frame the encoder got (copied: callers reuse their buffers). */
  keep(frame: Frame, nowMs: number): void {
    if (nowMs - this.#lastCopyAtMs < this.#copyEveryMs) return;
    this.#lastCopyAtMs = nowMs;
    const format = frame.format ?? 'RGB';
    const last = this.#last;
    if (last && last.width === frame.width && last.height === frame.height && last.format === format && last.data.length === frame.data.length) {
      last.data.set(frame.data);
      return;
    }
    this.#last = { width: frame.width, height: frame.height, format, ptsMs: frame.ptsMs, data: Buffer.from(frame.data) };
  }

  /** Forgets the kept frame (nothing of a deleted stream's picture outlives it). */
  clear(): void {
    this.#last = null;
    this.#lastCopyAtMs = -Infinity;
  }

  /** A slate frame of width×height: the stream's image when decoded, else the kept frame greyed when it has that size, else plain. */
  build(width: number, height: number): { frame: Frame; source: SlateSource } {
    const image = this.#image?.frame(width, height);
    if (image) return { frame: image, source: 'image' };
    const last = this.#last;
    if (last && last.width === width && last.height === height) return { frame: greyed(last), source: 'last_frame' };
    return { frame: plainSlate(width, height), source: 'plain' };
  }
}

/** Uniform dark grey, I420. */
export function plainSlate(width: number, height: number): Frame {
  const data = Buffer.alloc(frameBytes(width, height, 'I420'), NEUTRAL_CHROMA);
  data.fill(SLATE_Y_FLOOR, 0, width * height);
  return { width, height, format: 'I420', ptsMs: 0, data };
}

/** The frame's luma, dimmed into the slate range, with neutral chroma (I420). */
export function greyed(frame: Frame): Frame {
  const { width, height } = frame;
  const px = width * height;
  const out = Buffer.alloc(frameBytes(width, height, 'I420'), NEUTRAL_CHROMA);
  const src = frame.data;
  if ((frame.format ?? 'RGB') === 'I420') {
    for (let i = 0; i < px; i++) out[i] = SLATE_Y_FLOOR + Math.max(0, (src[i] as number) - 16) * GREY_GAIN;
  } else {
    // BT.601 limited-range luma from RGB.
    for (let i = 0, j = 0; i < px; i++, j += 3) {
      const y = (0.257 * (src[j] as number) + 0.504 * (src[j + 1] as number) + 0.098 * (src[j + 2] as number));
      out[i] = SLATE_Y_FLOOR + y * GREY_GAIN;
    }
  }
  return { width, height, format: 'I420', ptsMs: frame.ptsMs, data: out };
}
