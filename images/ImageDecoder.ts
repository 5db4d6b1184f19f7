/**
 * The one place client images are decoded (slate images on the API, slate pictures on the media
 * node, IP-Adapter style images in the engine), in-process with sharp (libvips), bounded:
 * - bytes: over `maxBytes` is refused before anything else;
 * - format: PNG, JPEG, WebP or GIF, told by the file's first bytes (sharp itself would also take
 *   SVG, TIFF, HEIF and raw, which no client needs; BMP is not in sharp's prebuilt libvips);
 * - PNG chunks: walked first (PngChunks.ts): the pixel cap from IHDR, compressed text/ICC chunks
 *   inflated under a cap and then dropped, so libvips never inflates a text bomb;
 * - pixels: `maxPixels`, from the header, before any pixel buffer (libvips' limitInputPixels);
 * - at once: `concurrency` decodes per process, `queue` more waiting; beyond, ImageBusyError;
 * - time: `timeoutS` (libvips' own timeout, plus a deadline here in case it reports no progress:
 *   the caller is answered then, the slot is held until libvips lets go).
 * Only the first frame of an animation is read; no metadata is read or kept.
 *
 * Why not ffmpeg any more: an ffmpeg child inflated a 1 MB PNG's 1 GiB zTXt chunk for 5 s
 * (0.6 GB resident, outside any limit of ours) before the kill, one child per request.
 */
import sharp from 'sharp';
import { ImageBusyError, ImageRejectedError } from './errors.ts';
import { DEFAULT_IMAGE_LIMITS, type ImageLimits } from './ImageLimits.ts';
import { PNG_SIGNATURE, stripPng } from './PngChunks.ts';

/**
 * The formats taken:
 * - `png`, `jpeg`, `webp`: still pictures;
 * - `gif`: its first frame.
 */
export type ImageFormat = 'png' | 'jpeg' | 'webp' | 'gif';

/**
 * How the picture is fitted to the asked size:
 * - `contain`: exactly width×height, the whole picture, letterboxed on `background`;
 * - `fill`: exactly width×height, stretched;
 * - `inside`: at most width×height, aspect kept, never enlarged.
 */
export type ImageFit = 'contain' | 'fill' | 'inside';

export interface Rgb {
  r: number;
  g: number;
  b: number;
}
const BLACK: Rgb = { r: 0, g: 0, b: 0 };

export interface DecodeTarget {
  width: number;
  height: number;
  fit: ImageFit;
  /** Behind transparency and around a `contain` picture; default black. */
  background?: Rgb;
}

/** Decoded pixels: RGB24, rows top to bottom, no padding. */
export interface RgbImage {
  width: number;
  height: number;
  data: Buffer;
}

export interface ImageDecoderStats {
  /** Decodes that ran (finished, failed or timed out). */
  decodes: number;
  /** Running now, and the most that ever ran at once. */
  active: number;
  peakActive: number;
  /** Refused because every slot and queue place was taken. */
  busy: number;
}

// Hostile input: nothing of one decode is worth keeping for another (libvips' operation cache
// would hold decoded pixels of earlier requests, up to 50 MB by default).
sharp.cache(false);

/** The format told by the first bytes, or null (magic numbers: PNG §5.2, JFIF SOI, RIFF/WEBP, GIF87a/89a). */
export function sniffImageFormat(b: Buffer): ImageFormat | null {
  if (b.length >= 8 && b.subarray(0, 8).equals(PNG_SIGNATURE)) return 'png';
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'jpeg';
  if (b.length >= 12 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP') return 'webp';
  if (b.length >= 6 && /^GIF8[79]a$/.test(b.toString('latin1', 0, 6))) return 'gif';
  return null;
}

export class ImageDecoder {
  readonly limits: Readonly<ImageLimits>;
  readonly #waiting: (() => void)[] = [];
  readonly #stats: ImageDecoderStats = { decodes: 0, active: 0, peakActive: 0, busy: 0 };

  constructor(limits: Partial<ImageLimits> = {}) {
    this.limits = Object.freeze({ ...DEFAULT_IMAGE_LIMITS, ...limits });
  }

  stats(): ImageDecoderStats {
    return { ...this.#stats };
  }

  /** Decodes client bytes to RGB at the target size. Rejects with ImageRejectedError (the client's fault, message fit to show) or ImageBusyError. */
  decode(bytes: Buffer, target: DecodeTarget): Promise<RgbImage> {
    return this.#guarded(bytes, async (image) => {
      const { data, info } = await image
        .resize(target.width, target.height, { fit: target.fit, background: target.background ?? BLACK, withoutEnlargement: target.fit === 'inside' })
        .raw()
        .toBuffer({ resolveWithObject: true });
      if (info.channels !== 3) throw new Error(`${info.channels} channels out`);
      return { width: info.width, height: info.height, data };
    }, target.background);
  }

  /**
   * Decodes client bytes and writes them again as a plain PNG of at most maxSide px a side (aspect
   * kept, never enlarged, transparency flattened onto `background`, no metadata): a file whose
   * every byte we wrote. Same caps and errors as decode(); the encode holds the same slot.
   */
  normalise(bytes: Buffer, maxSide: number, background: Rgb = BLACK): Promise<{ png: Buffer; width: number; height: number }> {
    return this.#guarded(bytes, async (image) => {
      const { data, info } = await image.resize(maxSide, maxSide, { fit: 'inside', withoutEnlargement: true }).png({ compressionLevel: 6 }).toBuffer({ resolveWithObject: true });
      return { png: data, width: info.width, height: info.height };
    }, background);
  }

  /** The caps before and around one libvips pipeline: bytes, format, PNG chunks, a slot, the deadline; errors made client-readable. */
  async #guarded<T>(bytes: Buffer, run: (image: sharp.Sharp) => Promise<T>, background: Rgb = BLACK): Promise<T> {
    const { maxBytes, maxPixels, timeoutS } = this.limits;
    if (bytes.length === 0) throw new ImageRejectedError('the image is empty');
    if (bytes.length > maxBytes) throw new ImageRejectedError(`the image is ${bytes.length} bytes, more than ${maxBytes}`);
    const format = sniffImageFormat(bytes);
    if (!format) throw new ImageRejectedError('not a PNG, JPEG, WebP or GIF image');
    const input = format === 'png' ? stripPng(bytes, { maxBytes, maxPixels }) : bytes;
    await this.#slot();
    this.#stats.decodes++;
    const image = sharp(input, { limitInputPixels: maxPixels, sequentialRead: true, pages: 1 })
      .timeout({ seconds: timeoutS })
      .flatten({ background })
      .toColourspace('srgb')
      .removeAlpha();
    const work = run(image).catch((err: unknown) => {
      const msg = (err as Error).message;
      if (/pixel limit/.test(msg)) throw new ImageRejectedError(`the image is more than ${maxPixels} pixels`, { cause: err });
      if (/timeout/i.test(msg)) throw new ImageRejectedError(`the image took longer than ${timeoutS} s to decode`, { cause: err });
      throw new ImageRejectedError(`the image does not decode as ${format.toUpperCase()}`, { cause: err });
    });
    // The slot is freed when libvips is done, even if the caller was answered at the deadline.
    void work.then(this.#release, this.#release);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ImageRejectedError(`the image took longer than ${timeoutS} s to decode`)), timeoutS * 1000 + 500);
    });
    try {
      return await Promise.race([work, deadline]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits for a decode slot, or refuses at once when the queue is full too. */
  #slot(): Promise<void> {
    const s = this.#stats;
    if (s.active < this.limits.concurrency) {
      s.active++;
      s.peakActive = Math.max(s.peakActive, s.active);
      return Promise.resolve();
    }
    if (this.#waiting.length >= this.limits.queue) {
      s.busy++;
      return Promise.reject(new ImageBusyError(`every image decode slot is taken (${this.limits.concurrency} running, ${this.limits.queue} waiting); try again shortly`, this.limits.timeoutS));
    }
    // The slot passes straight from the decode that frees it (active stays counted).
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  readonly #release = (): void => {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#stats.active--;
  };
}
