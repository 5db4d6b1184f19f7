/**
 * A stream-defined slate picture: an image the account set for the stream, shown by the slate
 * instead of the greyed last frame. The API checked the client's image once, when it was set, and
 * stored a normalised copy it wrote itself (a plain PNG of at most SLATE_IMAGE_MAX_SIDE px a side,
 * no metadata: streams/SlateImageService.ts) in the shared blob store, `slates/<streamId>/image.png`;
 * the client's original bytes are never stored, so no node ever decodes them. The node reads the
 * file itself, so the picture reaches whichever node holds the stream with no message: it looks
 * at the file (one stat, at most every `recheckMs`) while it builds slates, and decodes it once per
 * file version and stream size (not per viewer), through the process's bounded ImageDecoder all
 * the same. The picture is fitted to the stream's size, keeping its aspect, on the plain slate's
 * dark grey, as I420 (the encoder's layout).
 */
import { readFile, stat } from 'node:fs/promises';
import type { Logger } from 'pino';
import { ImageBusyError, type ImageDecoder, type RgbImage } from '../../images/index.ts';
import type { Frame } from './FrameProcessor.ts';

/** Name of the normalised picture in a stream's slate folder (`slates/<streamId>/`). */
export const SLATE_IMAGE_FILE = 'image.png';
/** Blob key of a stream's normalised slate picture. */
export function slateImageKey(streamId: string): string {
  return `slates/${streamId}/${SLATE_IMAGE_FILE}`;
}
/**
 * Longest side of the stored picture, px: streams are at most 1024 px a side (2048 after an
 * upscaler, which then enlarges the picture a little), and a 1920² RGB PNG stays under 11 MB even
 * for noise (a photo: a few MB).
 */
export const SLATE_IMAGE_MAX_SIDE = 1920;
/**
 * The plain slate's grey in RGB: BT.601 limited range Y = 16 + 219 × 56 / 255 ≈ 64, the plain
 * slate's luma, around a letterboxed picture.
 */
export const SLATE_PAD_RGB = { r: 56, g: 56, b: 56 } as const;

/** RGB24 → I420 (BT.601, limited range: ffmpeg's default for yuv420p, the encoder's input); chroma from each 2×2 block's average. */
export function rgbToI420(img: RgbImage): Frame {
  const { width: w, height: h, data: rgb } = img;
  const cw = Math.ceil(w / 2);
  const ch = Math.ceil(h / 2);
  const out = Buffer.alloc(w * h + 2 * cw * ch);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = (y * w + x) * 3;
      out[y * w + x] = Math.round(16 + (65.481 * rgb[i]! + 128.553 * rgb[i + 1]! + 24.966 * rgb[i + 2]!) / 255);
    }
  }
  const uAt = w * h;
  const vAt = uAt + cw * ch;
  for (let cy = 0; cy < ch; cy++) {
    for (let cx = 0; cx < cw; cx++) {
      let r = 0;
      let g = 0;
      let b = 0;
      let n = 0;
      for (let dy = 0; dy < 2 && cy * 2 + dy < h; dy++) {
        for (let dx = 0; dx < 2 && cx * 2 + dx < w; dx++) {
          const i = ((cy * 2 + dy) * w + cx * 2 + dx) * 3;
          r += rgb[i]!;
          g += rgb[i + 1]!;
          b += rgb[i + 2]!;
          n++;
        }
      }
      r /= n;
      g /= n;
      b /= n;
      out[uAt + cy * cw + cx] = Math.round(128 + (-37.797 * r - 74.203 * g + 112 * b) / 255);
      out[vAt + cy * cw + cx] = Math.round(128 + (112 * r - 93.786 * g - 18.214 * b) / 255);
    }
  }
  return { width: w, height: h, format: 'I420', ptsMs: 0, data: out };
}

/** The stream's slate picture file, decoded on demand for the slate (see the file comment). */
export class SlateImage {
  readonly #path: string;
  readonly #logger: Logger;
  readonly #recheckMs: number;
  readonly #images: ImageDecoder;
  #frame: Frame | null = null;
  /** The file (mtime, size) and frame size last decoded, or tried; '' when none. */
  #version = '';
  #checkedAtMs = -Infinity;
  #busy = false;
  #changed = false;

  constructor(opts: { path: string; logger: Logger; images: ImageDecoder; recheckMs?: number }) {
    this.#path = opts.path;
    this.#logger = opts.logger;
    this.#images = opts.images;
    this.#recheckMs = opts.recheckMs ?? 2000;
  }

  /** The decoded image at width×height, or null (none set, not decoded yet, or undecodable). Looks at the file at most every recheckMs. */
  frame(width: number, height: number): Frame | null {
    const now = performance.now();
    const sized = this.#frame && this.#frame.width === width && this.#frame.height === height;
    if (!this.#busy && (now - this.#checkedAtMs >= this.#recheckMs || (this.#frame && !sized))) {
      this.#checkedAtMs = now;
      this.#busy = true;
      void this.#refresh(width, height).finally(() => {
        this.#busy = false;
      });
    }
    return sized ? this.#frame : null;
  }

  /** Whether the decoded picture changed since the last call (the slate rebuilds its frame). */
  takeChanged(): boolean {
    const c = this.#changed;
    this.#changed = false;
    return c;
  }

  async #refresh(width: number, height: number): Promise<void> {
    const st = await stat(this.#path).catch(() => null);
    if (!st) {
      if (this.#frame) this.#changed = true;
      this.#frame = null;
      this.#version = '';
      return;
    }
    // Decoded (or failed) before for this file and size: nothing to do.
    const version = `${st.mtimeMs}:${st.size}:${width}x${height}`;
    if (version === this.#version) return;
    try {
      const rgb = await this.#images.decode(await readFile(this.#path), { width, height, fit: 'contain', background: SLATE_PAD_RGB });
      this.#frame = rgbToI420(rgb);
      this.#logger.info(`refresh() | slate image decoded [size:${width}x${height}] [bytes:${st.size}]`);
    } catch (err) {
      // Every decode slot taken: try again at the next look, rather than leaving the picture out.
      if (err instanceof ImageBusyError) return;
      // The API wrote this file: one that fails now is left out (plain or greyed slate).
      this.#frame = null;
      this.#logger.warn({ err }, 'refresh() | slate image left out');
    }
    this.#version = version;
    this.#changed = true;
  }
}
