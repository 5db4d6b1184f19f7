/**
 * A stream-defined slate picture: an image the account set for the stream (stored by the API in
 * the shared blob store, `slates/<streamId>/image`), shown by the slate instead of the greyed last
 * frame. The node reads the file itself, so the image reaches whichever node holds the stream
 * with no message: it looks at the file (one stat, at most every `recheckMs`) while it builds
 * slates, and decodes it again when it changed or the stream's size did.
 *
 * Decoding: the bytes came from a client, so ffmpeg may only read its stdin, only with image
 * demuxers and decoders (PNG, JPEG, WebP, BMP, GIF: no playlist, no container that could open
 * files or URLs), refuses images over SLATE_IMAGE_MAX_PIXELS before allocating a frame, and is
 * killed after SLATE_IMAGE_DECODE_TIMEOUT_MS. The picture is scaled to fit the stream's size,
 * keeping its aspect, on the plain slate's dark grey, as I420 (the encoder's layout).
 */
import { spawn } from 'node:child_process';
import { readFile, stat } from 'node:fs/promises';
import type { Logger } from 'pino';
import { frameBytes, type Frame } from './FrameProcessor.ts';

/** Name of the image file in a stream's slate folder (`slates/<streamId>/`). */
export const SLATE_IMAGE_FILE = 'image';
/** Blob key of a stream's slate image. */
export function slateImageKey(streamId: string): string {
  return `slates/${streamId}/${SLATE_IMAGE_FILE}`;
}
/** Largest image accepted, bytes (what the API fetches or takes at most). */
export const SLATE_IMAGE_MAX_BYTES = 5 * 1024 * 1024;
/** Largest image decoded, pixels (4096²): refused above it, before any frame buffer. */
export const SLATE_IMAGE_MAX_PIXELS = 4096 * 4096;
/** A decode taking longer is killed, ms. */
export const SLATE_IMAGE_DECODE_TIMEOUT_MS = 5000;
const DEMUXERS = 'png_pipe,jpeg_pipe,webp_pipe,bmp_pipe,gif,gif_pipe';
const DECODERS = 'png,mjpeg,webp,bmp,gif';
/** Limited-range Y 64 with neutral chroma: the plain slate's grey, around a letterboxed picture. */
const PAD_COLOR = '0x404040';

/** Decodes an image to an I420 frame of width×height (fitted, letterboxed). Rejects with a reason a client may read. */
export function decodeSlateImage(image: Buffer, width: number, height: number, ffmpegPath = 'ffmpeg'): Promise<Frame> {
  return new Promise((resolve, reject) => {
    const guard = ['-protocol_whitelist', 'pipe', '-format_whitelist', DEMUXERS, '-codec_whitelist', DECODERS, '-max_pixels', String(SLATE_IMAGE_MAX_PIXELS)];
    const vf = `scale=${width}:${height}:force_original_aspect_ratio=decrease,pad=${width}:${height}:(ow-iw)/2:(oh-ih)/2:color=${PAD_COLOR},format=yuv420p`;
    const p = spawn(ffmpegPath, ['-nostdin', '-v', 'error', ...guard, '-i', 'pipe:0', '-frames:v', '1', '-vf', vf, '-f', 'rawvideo', '-pix_fmt', 'yuv420p', 'pipe:1'], { stdio: ['pipe', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    let err = '';
    const timer = setTimeout(() => p.kill('SIGKILL'), SLATE_IMAGE_DECODE_TIMEOUT_MS);
    p.stdout.on('data', (c: Buffer) => chunks.push(c));
    p.stderr.on('data', (c: Buffer) => (err = (err + c.toString()).slice(-2000)));
    p.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`ffmpeg not runnable: ${e.message}`));
    });
    p.on('close', (code) => {
      clearTimeout(timer);
      const data = Buffer.concat(chunks);
      if (code === 0 && data.length === frameBytes(width, height, 'I420')) {
        resolve({ width, height, format: 'I420', ptsMs: 0, data });
        return;
      }
      reject(new Error(/exceeds specified max pixel count/.test(err) ? `larger than ${SLATE_IMAGE_MAX_PIXELS} pixels` : 'not a PNG, JPEG, WebP, BMP or GIF image that decodes'));
    });
    p.stdin.on('error', () => {});
    p.stdin.end(image);
  });
}

/** The stream's slate image file, decoded on demand for the slate (see the file comment). */
export class SlateImage {
  readonly #path: string;
  readonly #logger: Logger;
  readonly #recheckMs: number;
  readonly #ffmpegPath: string;
  #frame: Frame | null = null;
  /** The file (mtime, size) and frame size last decoded, or tried; '' when none. */
  #version = '';
  #checkedAtMs = -Infinity;
  #busy = false;
  #changed = false;

  constructor(opts: { path: string; logger: Logger; recheckMs?: number; ffmpegPath?: string }) {
    this.#path = opts.path;
    this.#logger = opts.logger;
    this.#recheckMs = opts.recheckMs ?? 2000;
    this.#ffmpegPath = opts.ffmpegPath ?? 'ffmpeg';
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
      if (st.size > SLATE_IMAGE_MAX_BYTES) throw new Error(`${st.size} bytes (cap ${SLATE_IMAGE_MAX_BYTES})`);
      this.#frame = await decodeSlateImage(await readFile(this.#path), width, height, this.#ffmpegPath);
      this.#logger.info(`refresh() | slate image decoded [size:${width}x${height}] [bytes:${st.size}]`);
    } catch (err) {
      // The API checked it when it was set: a file that fails now is left out (plain or greyed slate).
      this.#frame = null;
      this.#logger.warn({ err }, 'refresh() | slate image left out');
    }
    this.#version = version;
    this.#changed = true;
  }
}
