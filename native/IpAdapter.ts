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
 * raw base64; its size (5 MiB) and time (5 s) caps are enforced here again. Decoding uses ffmpeg
 * (any PNG/JPEG/WebP; `sharp` is not installed in this repo), scaled straight to 224×224.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { CLIP_SIZE, clipPixels } from './ClipImage.ts';
import { InferenceError, ModelLoadError } from './errors.ts';
import type { ModelSessions } from './ModelSessions.ts';

/** Fetches a style image over HTTPS; the caller enforces its SSRF policy and these caps. */
export type FetchImage = (url: string, limits: { maxBytes: number; timeoutMs: number }) => Promise<Buffer>;

export const STYLE_IMAGE_MAX_BYTES = 5 * 1024 * 1024;
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

  /** Style image bytes → tokens [K·D] (unscaled). */
  async encode(image: Buffer): Promise<Float32Array> {
    const rgb = await decodeTo224(image);
    const pixels = clipPixels({ width: CLIP_SIZE, height: CLIP_SIZE, data: rgb, ptsMs: 0 });
    const out = await this.#sessions.runExtra('image_encoder', this.#session, { pixel_values: new ort.Tensor('float32', pixels, [1, 3, CLIP_SIZE, CLIP_SIZE]) });
    const t = out.image_embeds as ort.Tensor;
    if (t.dims[2] !== this.#sessions.info.embedDim) throw new InferenceError('image_encoder', `image_embeds width ${t.dims[2]} != text width ${this.#sessions.info.embedDim}`);
    return Float32Array.from(t.data as Float32Array);
  }
}

/** Loads the style image: `data:` URL or raw base64 locally, http(s) through `fetchImage`; caps enforced. */
export async function loadStyleImage(url: string, fetchImage: FetchImage | undefined): Promise<Buffer> {
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
      buf = await Promise.race([fetchImage(url, { maxBytes: STYLE_IMAGE_MAX_BYTES, timeoutMs: STYLE_IMAGE_TIMEOUT_MS }), timeout]);
    } finally {
      clearTimeout(timer);
    }
  } else {
    buf = Buffer.from(url, 'base64');
  }
  if (buf.length > STYLE_IMAGE_MAX_BYTES) throw new InferenceError('ip_adapter', `style image is ${buf.length} bytes (cap ${STYLE_IMAGE_MAX_BYTES})`);
  if (buf.length === 0) throw new InferenceError('ip_adapter', 'style image is empty');
  return buf;
}

/** Image formats a style image may be in: ffmpeg's piped-image demuxers and decoders for them. */
const STYLE_IMAGE_DEMUXERS = 'png_pipe,jpeg_pipe,webp_pipe,bmp_pipe,gif,gif_pipe';
const STYLE_IMAGE_DECODERS = 'png,mjpeg,webp,bmp,gif';
/** Largest style image, pixels (4096²): decoding is refused above it, before any frame buffer. */
export const STYLE_IMAGE_MAX_PIXELS = 4096 * 4096;

/**
 * Decodes a PNG, JPEG, WebP, BMP or GIF to 224×224 RGB24 (5 s cap). The bytes come from a
 * client: ffmpeg may only read the pipe, only with image demuxers and decoders (no playlist, no
 * container that could open files or URLs), and refuses images over STYLE_IMAGE_MAX_PIXELS.
 */
export function decodeTo224(image: Buffer): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const guard = ['-protocol_whitelist', 'pipe', '-format_whitelist', STYLE_IMAGE_DEMUXERS, '-codec_whitelist', STYLE_IMAGE_DECODERS, '-max_pixels', String(STYLE_IMAGE_MAX_PIXELS)];
    const p = spawn('ffmpeg', ['-v', 'error', ...guard, '-i', 'pipe:0', '-frames:v', '1', '-vf', `scale=${CLIP_SIZE}:${CLIP_SIZE}`, '-f', 'rawvideo', '-pix_fmt', 'rgb24', 'pipe:1'], { stdio: ['pipe', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    let err = '';
    const timer = setTimeout(() => p.kill('SIGKILL'), STYLE_IMAGE_TIMEOUT_MS);
    p.stdout.on('data', (c: Buffer) => chunks.push(c));
    p.stderr.on('data', (c: Buffer) => (err += c.toString()));
    p.on('error', (e) => {
      clearTimeout(timer);
      reject(new InferenceError('ip_adapter', `ffmpeg not runnable: ${e.message}`, { cause: e }));
    });
    p.on('close', (code) => {
      clearTimeout(timer);
      const out = Buffer.concat(chunks);
      if (code !== 0 || out.length !== CLIP_SIZE * CLIP_SIZE * 3) {
        const why = /exceeds specified max pixel count/.test(err) ? `larger than ${STYLE_IMAGE_MAX_PIXELS} pixels` : 'not a PNG, JPEG, WebP, BMP or GIF image ffmpeg can decode';
        reject(new InferenceError('ip_adapter', `cannot decode style image: ${why}`));
      }
      else resolve(new Uint8Array(out.buffer, out.byteOffset, out.length));
    });
    p.stdin.on('error', () => {});
    p.stdin.end(image);
  });
}
