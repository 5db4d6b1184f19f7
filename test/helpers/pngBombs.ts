/**
 * Hostile PNGs built chunk by chunk (zlib + crc32 from node:zlib, no fixtures): small files whose
 * text chunks, ICC profile or pixel count inflate to far more memory than their size, and a
 * legitimate-looking image whose pixels compress 1000:1. Each is made in bounded memory: the
 * zeros are streamed through deflate 1 MiB at a time.
 */
import { constants, crc32, createDeflate, deflateSync } from 'node:zlib';

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** One PNG chunk: length, type, data, CRC-32 over type and data (PNG §5.3). */
export function pngChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(data, crc32(head.subarray(4))) >>> 0, 0);
  return Buffer.concat([head, data, crc]);
}

function ihdr(width: number, height: number): Buffer {
  const d = Buffer.alloc(13);
  d.writeUInt32BE(width, 0);
  d.writeUInt32BE(height, 4);
  d[8] = 8; // bit depth
  d[9] = 2; // colour type: RGB
  return pngChunk('IHDR', d); // compression, filter, interlace: 0
}

/** zlib stream of `bytes` zero bytes, compressed 1 MiB at a time (≈ 1000:1). */
export async function deflatedZeros(bytes: number): Promise<Buffer> {
  const z = createDeflate({ level: constants.Z_BEST_COMPRESSION, memLevel: 9 });
  const out: Buffer[] = [];
  z.on('data', (c: Buffer) => out.push(c));
  const done = new Promise<void>((resolve, reject) => {
    z.on('end', resolve);
    z.on('error', reject);
  });
  const block = Buffer.alloc(1024 * 1024);
  for (let left = bytes; left > 0; left -= block.length) {
    const part = left >= block.length ? block : block.subarray(0, left);
    if (!z.write(part)) await new Promise((r) => z.once('drain', r));
  }
  z.end();
  await done;
  return Buffer.concat(out);
}

/** A plain RGB PNG of width×height, every scanline filter 0 and `rgb` pixels. */
export function plainPng(width: number, height: number, rgb: readonly [number, number, number]): Buffer {
  const row = Buffer.alloc(1 + width * 3);
  for (let x = 0; x < width; x++) row.set(rgb, 1 + x * 3);
  const raw = Buffer.concat(Array.from({ length: height }, () => row));
  return Buffer.concat([SIGNATURE, ihdr(width, height), pngChunk('IDAT', deflateSync(raw)), pngChunk('IEND', Buffer.alloc(0))]);
}

/** A valid small PNG carrying a zTXt chunk whose text inflates to `textBytes`. */
export async function ztxtBomb(textBytes: number): Promise<Buffer> {
  const text = Buffer.concat([Buffer.from('Comment\0\0', 'latin1'), await deflatedZeros(textBytes)]);
  const img = plainPng(16, 16, [200, 40, 150]);
  // Before IDAT, after IHDR (PNG §5.6 lets text chunks sit anywhere between them).
  return Buffer.concat([img.subarray(0, 33), pngChunk('zTXt', text), img.subarray(33)]);
}

/** Same, with an iTXt chunk (compressed flag 1). */
export async function itxtBomb(textBytes: number): Promise<Buffer> {
  const text = Buffer.concat([Buffer.from('Comment\0\x01\0\0\0', 'latin1'), await deflatedZeros(textBytes)]);
  const img = plainPng(16, 16, [200, 40, 150]);
  return Buffer.concat([img.subarray(0, 33), pngChunk('iTXt', text), img.subarray(33)]);
}

/** A valid small PNG whose iCCP profile inflates to `profileBytes`. */
export async function iccpBomb(profileBytes: number): Promise<Buffer> {
  const profile = Buffer.concat([Buffer.from('icc\0\0', 'latin1'), await deflatedZeros(profileBytes)]);
  const img = plainPng(16, 16, [200, 40, 150]);
  return Buffer.concat([img.subarray(0, 33), pngChunk('iCCP', profile), img.subarray(33)]);
}

/** A width×height RGB PNG whose IDAT is a zlib stream of zeros: tiny file, width·height·3 bytes of pixels. */
export async function pixelBomb(width: number, height: number, rowsInIdat = height): Promise<Buffer> {
  const idat = await deflatedZeros(rowsInIdat * (1 + width * 3));
  return Buffer.concat([SIGNATURE, ihdr(width, height), pngChunk('IDAT', idat), pngChunk('IEND', Buffer.alloc(0))]);
}
