/**
 * The bounded decoder for client images, on its own: real libvips (sharp), real bombs built chunk
 * by chunk. Bombs are refused from their chunk list or header before libvips allocates for them;
 * at most `concurrency` decodes run at once, `queue` more wait, the rest are refused as busy.
 */
import { execFileSync } from 'node:child_process';
import t from 'tap';
import { ImageBusyError, ImageDecoder, ImageRejectedError } from '../../images/index.ts';
import { iccpBomb, itxtBomb, pixelBomb, plainPng, ztxtBomb } from '../helpers/pngBombs.ts';

const MiB = 1024 * 1024;
const target = { width: 64, height: 64, fit: 'contain' as const };

t.test('text and ICC bombs are refused after inflating at most the byte cap, in well under a second', { timeout: 60_000 }, async (t) => {
  const images = new ImageDecoder();
  for (const [what, bytes, chunk] of [
    ['zTXt', await ztxtBomb(1024 * MiB), 'zTXt'],
    ['iTXt', await itxtBomb(256 * MiB), 'iTXt'],
    ['iCCP', await iccpBomb(1024 * MiB), 'iCCP'],
  ] as const) {
    const t0 = performance.now();
    await t.rejects(images.decode(bytes, target), new ImageRejectedError(`the PNG's ${chunk} chunk inflates to more than ${5 * MiB} bytes (text and ICC chunks together)`), what);
    t.ok(performance.now() - t0 < 1000, `${what}: refused in ${Math.round(performance.now() - t0)} ms`);
  }
  t.equal(images.stats().decodes, 0, 'libvips never saw them');
});

t.test('a pixel bomb is refused from its header', { timeout: 30_000 }, async (t) => {
  const images = new ImageDecoder();
  await t.rejects(images.decode(await pixelBomb(30000, 30000, 16), target), { name: 'ImageRejectedError', message: 'the image is 30000×30000, more than 16777216 pixels' });
  // A JPEG's size comes from libvips' header read (limitInputPixels), before its pixels.
  const jpeg = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'color=red:s=4200x4100', '-frames:v', '1', '-c:v', 'mjpeg', '-f', 'image2pipe', 'pipe:1'], { maxBuffer: 64 * MiB });
  await t.rejects(images.decode(jpeg, target), { name: 'ImageRejectedError', message: 'the image is more than 16777216 pixels' });
});

t.test('only PNG, JPEG, WebP and GIF are taken; bytes over the cap and empty input are refused first', { timeout: 30_000 }, async (t) => {
  const images = new ImageDecoder({ maxBytes: 64 * 1024 });
  const svg = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><image href="file:///etc/passwd"/></svg>');
  const tiff = Buffer.from([0x49, 0x49, 0x2a, 0x00, 8, 0, 0, 0]);
  for (const b of [svg, tiff, Buffer.from('BM\0\0\0\0')]) await t.rejects(images.decode(b, target), { message: 'not a PNG, JPEG, WebP or GIF image' });
  await t.rejects(images.decode(Buffer.alloc(0), target), { message: 'the image is empty' });
  await t.rejects(images.decode(Buffer.alloc(64 * 1024 + 1), target), { message: `the image is ${64 * 1024 + 1} bytes, more than ${64 * 1024}` });
  const gif = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'color=c=0x00ff00:s=32x32', '-frames:v', '2', '-f', 'gif', 'pipe:1']);
  const rgb = await images.decode(gif, { width: 4, height: 4, fit: 'fill' });
  t.same([rgb.width, rgb.height, rgb.data.length], [4, 4, 48], 'a GIF decodes (first frame) to 4×4 RGB');
  t.ok(rgb.data[1]! > 200 && rgb.data[0]! < 60, `green (${[...rgb.data.subarray(0, 3)].join(',')})`);
});

t.test('at most `concurrency` decodes run at once; `queue` more wait; one more is busy', { timeout: 60_000 }, async (t) => {
  const images = new ImageDecoder({ concurrency: 2, queue: 2 });
  const heavy = await pixelBomb(4096, 4096); // 48 MiB of pixels from 49 KB: ≈ 0.3 s a decode
  const results = await Promise.allSettled(Array.from({ length: 7 }, () => images.decode(heavy, target)));
  const served = results.filter((r) => r.status === 'fulfilled').length;
  const busy = results.filter((r) => r.status === 'rejected' && r.reason instanceof ImageBusyError);
  t.equal(served, 4, '2 ran, 2 waited and ran');
  t.equal(busy.length, 3, 'the other 3 were refused at once');
  t.equal(images.stats().peakActive, 2, 'never more than 2 at once');
  t.equal(images.stats().active, 0, 'every slot given back');
  t.match((busy[0] as PromiseRejectedResult).reason, { retryAfterS: 2 });
  // The slots are free again.
  t.equal((await images.decode(plainPng(8, 8, [1, 2, 3]), target)).data.length, 64 * 64 * 3);
});

t.test('normalise writes a plain PNG of at most maxSide a side, transparency flattened', { timeout: 30_000 }, async (t) => {
  const images = new ImageDecoder();
  const rgba = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'color=c=red@0.0:s=300x100,format=rgba', '-frames:v', '1', '-c:v', 'png', '-f', 'image2pipe', 'pipe:1']);
  const { png, width, height } = await images.normalise(rgba, 120, { r: 56, g: 56, b: 56 });
  t.same([width, height], [120, 40]);
  const back = await images.decode(png, { width: 1, height: 1, fit: 'fill' });
  t.same([...back.data], [56, 56, 56], 'transparent pixels became the background');
});
