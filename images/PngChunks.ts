/**
 * A PNG's chunk list, read before libvips sees the file (chunk headers only, PNG §5.3), so a small
 * file cannot make the decoder inflate much more than itself:
 * - IHDR's width × height is checked against the pixel cap before anything is allocated;
 * - compressed text and ICC chunks (zTXt, iTXt, iCCP) are inflated here with an output cap (the
 *   image byte cap, for all of them together): one that inflates further is refused, naming the chunk. libvips' own
 *   chunk/cache limits (≈ 60 MB per chunk) would refuse a 1 GiB one too, but only after inflating
 *   that much, and it keeps anything under them;
 * - what goes on to the decoder holds only the chunks a picture needs (IHDR, PLTE, tRNS, IDAT,
 *   IEND): no text, no ICC profile, no APNG frames (the first frame is the picture). We read no
 *   metadata, so none is decoded.
 */
import { inflateSync } from 'node:zlib';
import { ImageRejectedError } from './errors.ts';

export const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
/** The chunks kept for the decoder (PNG §11.2 critical chunks, and tRNS for transparency). */
const KEPT = new Set(['IHDR', 'PLTE', 'tRNS', 'IDAT', 'IEND']);

/** Offset of a compressed payload inside a chunk's data, or -1 when it carries none. */
function compressedAt(type: string, data: Buffer): number {
  const nul = data.indexOf(0);
  if (nul < 0) return -1;
  if (type === 'zTXt' || type === 'iCCP') return nul + 2; // keyword/name, NUL, method
  if (type === 'iTXt') {
    if (data[nul + 1] !== 1) return -1; // not compressed
    const lang = data.indexOf(0, nul + 3);
    const translated = lang < 0 ? -1 : data.indexOf(0, lang + 1);
    return translated < 0 ? -1 : translated + 1;
  }
  return -1;
}

/**
 * Checks a PNG's chunks and returns it with only the picture's chunks (see the file comment).
 * Throws ImageRejectedError naming what is wrong.
 */
export function stripPng(png: Buffer, limits: { maxBytes: number; maxPixels: number }): Buffer {
  const kept: Buffer[] = [PNG_SIGNATURE];
  let at = PNG_SIGNATURE.length;
  let first = true;
  // Bytes all compressed chunks may inflate to together: many small ones cost no more than one.
  let budget = limits.maxBytes;
  while (at < png.length) {
    if (at + 12 > png.length) throw new ImageRejectedError('the PNG is truncated (a chunk header runs past the end)');
    const length = png.readUInt32BE(at);
    const type = png.toString('latin1', at + 4, at + 8);
    const end = at + 12 + length;
    if (end > png.length) throw new ImageRejectedError(`the PNG is truncated (its ${type} chunk runs past the end)`);
    const data = png.subarray(at + 8, at + 8 + length);
    if (first) {
      if (type !== 'IHDR' || length !== 13) throw new ImageRejectedError('the PNG does not start with its header chunk (IHDR)');
      const width = data.readUInt32BE(0);
      const height = data.readUInt32BE(4);
      if (width === 0 || height === 0) throw new ImageRejectedError(`the PNG is ${width}×${height} pixels`);
      if (width * height > limits.maxPixels) throw new ImageRejectedError(`the image is ${width}×${height}, more than ${limits.maxPixels} pixels`);
      first = false;
    }
    const z = compressedAt(type, data);
    if (z >= 0) {
      try {
        budget -= inflateSync(data.subarray(z), { maxOutputLength: Math.max(1, budget) }).length;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') {
          throw new ImageRejectedError(`the PNG's ${type} chunk inflates to more than ${limits.maxBytes} bytes (text and ICC chunks together)`);
        }
        // A broken text or ICC chunk is dropped below like any other; the picture may still be fine.
      }
    }
    if (KEPT.has(type)) kept.push(png.subarray(at, end));
    at = end;
    if (type === 'IEND') break;
  }
  if (first) throw new ImageRejectedError('the PNG has no chunks');
  return Buffer.concat(kept);
}
