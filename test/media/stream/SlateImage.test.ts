/**
 * The node's side of a slate image: it reads the normalised PNG the API wrote and decodes it
 * through the process's bounded decoder once per file version and stream size, however often the
 * slate asks (every slate frame, every viewer that attaches); a decoder busy with others delays
 * the picture rather than dropping it. Real files, real libvips.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { ImageDecoder } from '../../../images/index.ts';
import { SlateImage } from '../../../media/stream/SlateImage.ts';
import { pixelBomb, plainPng } from '../../helpers/pngBombs.ts';
import { until } from '../../helpers/until.ts';

const logger = pino({ level: 'silent' });

function setup(t: { teardown(fn: () => unknown): void }) {
  const dir = mkdtempSync(join(tmpdir(), 'rv-slate-image-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'image.png');
}

t.test('decoded once per file version and size, however many slate frames ask', { timeout: 30_000 }, async (t) => {
  const path = setup(t);
  const images = new ImageDecoder();
  writeFileSync(path, (await images.normalise(plainPng(320, 240, [200, 40, 150]), 1920)).png);
  const before = images.stats().decodes;
  const slate = new SlateImage({ path, logger, images, recheckMs: 0 });
  const frame = await until('the picture', () => slate.frame(64, 48), (f) => f !== null, 10_000, 10);
  t.equal(frame?.format, 'I420');
  t.equal(frame?.data.length, 64 * 48 * 1.5);
  // Magenta in BT.601 limited range: ffmpeg's rgb24→yuv420p gives Y 102, U 153, V 190 for 200,40,150.
  const y = frame!.data[24 * 64 + 32]!;
  const u = frame!.data[64 * 48 + 12 * 32 + 16]!;
  const v = frame!.data[64 * 48 + 32 * 24 + 12 * 32 + 16]!;
  t.ok(Math.abs(y - 102) <= 2 && Math.abs(u - 153) <= 2 && Math.abs(v - 190) <= 2, `centre YUV ${y},${u},${v}`);
  // A 4:3 picture in 64×48 fills it; in 64×64 it is letterboxed on the slate's grey (Y ≈ 64).
  for (let i = 0; i < 200; i++) slate.frame(64, 48); // 200 slate frames / attaching viewers
  await new Promise((r) => setImmediate(r));
  t.equal(images.stats().decodes - before, 1, 'one decode for 200 asks');
  const square = await until('the 64² picture', () => slate.frame(64, 64), (f) => f !== null, 10_000, 10);
  t.equal(images.stats().decodes - before, 2, 'a new stream size decodes again, once');
  t.ok(Math.abs(square!.data[0]! - 64) <= 2, `letterbox luma ${square!.data[0]}`);
});

t.test('a decoder busy with other images delays the picture, it does not drop it', { timeout: 30_000 }, async (t) => {
  const path = setup(t);
  const images = new ImageDecoder({ concurrency: 1, queue: 0 });
  writeFileSync(path, (await images.normalise(plainPng(32, 32, [10, 200, 10]), 1920)).png);
  const hold = images.decode(await pixelBomb(4096, 4096), { width: 8, height: 8, fit: 'fill' }); // takes the only slot ≈ 0.3 s
  const slate = new SlateImage({ path, logger, images, recheckMs: 0 });
  t.equal(slate.frame(32, 32), null, 'nothing yet');
  await until('a refusal while busy', () => images.stats().busy, (n) => n >= 1, 5_000, 5);
  await hold;
  const frame = await until('the picture once the slot is free', () => slate.frame(32, 32), (f) => f !== null, 10_000, 10);
  t.ok(frame, 'shown after all');
});
