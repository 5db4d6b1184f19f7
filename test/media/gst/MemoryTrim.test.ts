/**
 * MemoryTrim hands memory freed in the middle of malloc's heaps back to the kernel: real glibc,
 * real allocations (Node's ArrayBuffers under the addon's 128 KiB mmap threshold come from malloc).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pino from 'pino';
import t from 'tap';
import { MemoryTrim } from '../../../media/gst/MemoryTrim.ts';
import { loadGst } from '../../../media/gst/gst.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

t.test('memory freed below live blocks goes back to the kernel after a trim, and only then', async (t) => {
  loadGst(); // sets the 128 KiB mmap threshold: the blocks below are malloc'd in an arena
  const trim = new MemoryTrim({ afterCloseMs: 10, intervalMs: 0, logger: pino({ level: 'silent' }) });
  t.teardown(() => trim.close());
  trim.trim('settle'); // whatever earlier work left
  const base = process.memoryUsage.rss();
  // 256 MiB in 64 KiB blocks, touched; every 64th kept alive, so the free space lies between live
  // blocks, where free() alone cannot give it back (only the top of a heap is trimmed on free).
  const blocks: (Uint8Array | null)[] = Array.from({ length: 4096 }, () => new Uint8Array(64 * 1024).fill(1));
  for (let i = 0; i < blocks.length; i++) if (i % 64 !== 0) blocks[i] = null;
  for (let i = 0; i < 3; i++) gc();
  await new Promise((r) => setImmediate(r));
  const freed = process.memoryUsage.rss();
  // Still resident after free and GC: this is what the trim is for.
  t.ok(freed - base > 200 * 2 ** 20, `freed and collected, the memory stays resident (+${((freed - base) / 2 ** 20).toFixed(0)} MiB)`);
  const released = trim.trim('test');
  const after = process.memoryUsage.rss();
  t.comment(`RSS after free ${(freed / 2 ** 20).toFixed(0)} MiB, after trim ${(after / 2 ** 20).toFixed(0)} MiB; released ${(released / 2 ** 20).toFixed(0)} MiB`);
  t.ok(released > 128 * 2 ** 20, `the trim released more than half of the 252 MiB freed (${(released / 2 ** 20).toFixed(0)} MiB)`);
  t.equal(trim.trims, 2, 'trims counted');
  t.ok(trim.releasedBytes >= released && trim.seconds > 0, 'released bytes and time counted');
  t.equal(blocks.filter(Boolean).length, 64, 'the live blocks are still there');
});

t.test('a trim follows stream closes once they are over; close() cancels it', async (t) => {
  const trim = new MemoryTrim({ afterCloseMs: 50, intervalMs: 0, logger: pino({ level: 'silent' }) });
  trim.streamClosed();
  trim.streamClosed();
  const start = performance.now();
  while (trim.trims === 0 && performance.now() - start < 5000) await new Promise((r) => setTimeout(r, 10));
  t.equal(trim.trims, 1, 'two closes in a row → one trim');
  trim.streamClosed();
  trim.close();
  await new Promise((r) => setTimeout(r, 100));
  t.equal(trim.trims, 1, 'none after close()');
});
