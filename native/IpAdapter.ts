/**
 * IP-Adapter, approximated: an `image_encoder/model.onnx` in the model folder maps the style image
 * (`pixel_values` [1,3,224,224], CLIP-normalised) to `image_embeds` [1,K,D] tokens that are appended
 * to the text tokens of every conditional UNet slot, times `scale`. Real IP-Adapter adds a second,
 * decoupled cross-attention per UNet layer with its own K/V weights; our tiny UNet has one attention
 * and reads the extra tokens through it. The I/O (more encoder_hidden_states tokens) is what a real
 * UNet exported with IP-Adapter tokens folded into its sequence would take; `weight_type` other than
 * `linear` (per-layer scale schedules) is accepted but applied as linear and reported in status.
 *
 * The style image comes from `fetchImage` (the caller's SSRF-safe HTTPS client), a `data:` URL or
 * raw base64; its size (the image byte cap, 5 MiB by default) and download time (5 s) caps are
 * enforced here again. It is decoded in-process by the engine's ImageDecoder (images/: PNG, JPEG,
 * WebP or GIF under byte, pixel and time caps), scaled straight to 224×224.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import type { ImageDecoder } from '../images/index.ts';
import { CLIP_SIZE, clipPixels } from './ClipImage.ts';
import { InferenceError, ModelLoadError } from './errors.ts';
import type { ModelSessions } from './ModelSessions.ts';

/** Fetches a style image over HTTPS; the caller enforces its SSRF policy and these caps. */
export type FetchImage = (url: string, limits: { maxBytes: number; timeoutMs: number }) => Promise<Buffer>;

/** A style image download taking longer is abandoned, ms. */
export const STYLE_IMAGE_TIMEOUT_MS = 5_000;

export class IpAdapter {
  readonly #session: ort.InferenceSession;
  readonly #sessions: ModelSessions;

  private constructor(session: ort.InferenceSession, sessions: ModelSessions) {
    this.#session = session;
    this.#sessions = sessions;
  }

  /** Whether the model folder ships an image encoder. */
  static available(sessions: ModelSessions): boolean {
    return existsSync(join(sessions.info.modelDir, 'image_encoder', 'model.onnx'));
  }

  static async open(sessions: ModelSessions): Promise<IpAdapter> {
    const file = join(sessions.info.modelDir, 'image_encoder', 'model.onnx');
    if (!existsSync(file)) throw new ModelLoadError(sessions.info.modelDir, 'ip_adapter needs image_encoder/model.onnx');
    const s = await sessions.openExtra(file);
    if (!s.inputNames.includes('pixel_values') || !s.outputNames.includes('image_embeds')) {
      throw new ModelLoadError(file, 'image encoder needs input pixel_values and output image_embeds');
    }
    return new IpAdapter(s, sessions);
  }

  /** Style image bytes → tokens [K·D] (unscaled), decoded through `images`. */
  async encode(image: Buffer, images: ImageDecoder): Promise<Float32Array> {
    const rgb = await decodeTo224(image, images);
    const pixels = clipPixels({ width: CLIP_SIZE, height: CLIP_SIZE, data: rgb, ptsMs: 0 });
    const out = await this.#sessions.runExtra('image_encoder', this.#session, { pixel_values: new ort.Tensor('float32', pixels, [1, 3, CLIP_SIZE, CLIP_SIZE]) });
    const t = out.image_embeds as ort.Tensor;
    if (t.dims[2] !== this.#sessions.info.embedDim) throw new InferenceError('image_encoder', `image_embeds width ${t.dims[2]} != text width ${this.#sessions.info.embedDim}`);
    return Float32Array.from(t.data as Float32Array);
  }
}

/** Loads the style image: `data:` URL or raw base64 locally, http(s) through `fetchImage`; at most `maxBytes` (the image byte cap). */
export async function loadStyleImage(url: string, fetchImage: FetchImage | undefined, maxBytes: number): Promise<Buffer> {
  let buf: Buffer;
  if (url.startsWith('data:')) {
    const comma = url.indexOf(',');
    if (comma < 0 || !/;base64$/.test(url.slice(0, comma))) throw new InferenceError('ip_adapter', 'style image data: URL must be base64');
    buf = Buffer.from(url.slice(comma + 1), 'base64');
  } else if (/^https?:\/\//i.test(url)) {
    if (!fetchImage) throw new InferenceError('ip_adapter', 'no fetchImage configured: cannot download the style image');
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new InferenceError('ip_adapter', `style image download exceeded ${STYLE_IMAGE_TIMEOUT_MS} ms`)), STYLE_IMAGE_TIMEOUT_MS);
    });
    try {
      buf = await Promise.race([fetchImage(url, { maxBytes, timeoutMs: STYLE_IMAGE_TIMEOUT_MS }), timeout]);
    } finally {
      clearTimeout(timer);
    }
  } else {
    buf = Buffer.from(url, 'base64');
  }
  if (buf.length > maxBytes) throw new InferenceError('ip_adapter', `style image is ${buf.length} bytes (cap ${maxBytes})`);
  if (buf.length === 0) throw new InferenceError('ip_adapter', 'style image is empty');
  return buf;
}

/**
 * Decodes a PNG, JPEG, WebP or GIF style image to 224×224 RGB24 (stretched: CLIP's input),
 * through `images` (in-process, under its byte, pixel and time caps: images/ImageDecoder.ts).
 */
export async function decodeTo224(image: Buffer, images: ImageDecoder): Promise<Uint8Array> {
  try {
    const { data } = await images.decode(image, { width: CLIP_SIZE, height: CLIP_SIZE, fit: 'fill' });
    return new Uint8Array(data.buffer, data.byteOffset, data.length);
  } catch (err) {
    throw new InferenceError('ip_adapter', `cannot decode style image: ${(err as Error).message}`, { cause: err });
  }
}
