import t from 'tap';
import { ClipBuffer } from '../../media/ClipBuffer.ts';
import type { CompletedSegment } from '../../media/HlsPackager.ts';

let msn = 0;
const seg = (o: Partial<CompletedSegment> = {}): CompletedSegment => ({
  msn: msn++,
  initId: 0,
  init: Buffer.from('init0'),
  bytes: Buffer.alloc(1000),
  durationMs: 1000,
  wallStartMs: 1_000_000 + msn * 1000,
  discontinuity: false,
  ...o,
});

t.test('take: the newest segments nearest to the asked length, oldest first', async (t) => {
  const b = new ClipBuffer();
  t.equal(b.take(5), null, 'nothing held: null');
  const all = Array.from({ length: 20 }, () => seg());
  for (const s of all) b.push(s);
  const c = b.take(5)!;
  t.same(c.segments.map((s) => s.msn), all.slice(-5).map((s) => s.msn));
  t.equal(c.durationMs, 5000);
  t.equal(c.startedAtMs, all[15]!.wallStartMs);
  t.equal(c.init.toString(), 'init0');
  t.equal(b.take(60)!.durationMs, 20_000, 'less held than asked: all of it');
});

t.test('uneven segments: the nearest total, never two segments over', async (t) => {
  const b = new ClipBuffer();
  for (const d of [2000, 2000, 2000, 600]) b.push(seg({ durationMs: d }));
  t.equal(b.take(3)!.durationMs, 2600, '0.6 + 2 s is nearer 3 s than 0.6 + 2 + 2 s');
  t.equal(b.take(4)!.durationMs, 4600, '4.6 s (0.6 over) rather than 2.6 s (1.4 short)');
});

t.test('a clip stops at an init change and at a discontinuity', async (t) => {
  const b = new ClipBuffer();
  for (let i = 0; i < 5; i++) b.push(seg({ initId: 1, init: Buffer.from('init1') }));
  for (let i = 0; i < 3; i++) b.push(seg({ initId: 2, init: Buffer.from('init2') }));
  const c = b.take(10)!;
  t.equal(c.segments.length, 3, 'only the segments of the newest init');
  t.equal(c.init.toString(), 'init2');
  b.push(seg({ initId: 2, init: Buffer.from('init2'), discontinuity: true }));
  b.push(seg({ initId: 2, init: Buffer.from('init2') }));
  t.equal(b.take(10)!.segments.length, 2, 'not back past the publisher reconnect');
  t.ok(b.take(10)!.segments[0]!.discontinuity, 'the clip starts with the segment after the gap');
});

t.test('bounded by media time and by bytes, oldest first out', async (t) => {
  const byTime = new ClipBuffer({ maxMs: 10_000 });
  for (let i = 0; i < 30; i++) byTime.push(seg());
  t.equal(byTime.heldMs, 10_000);
  const byBytes = new ClipBuffer({ maxBytes: 5_500 });
  for (let i = 0; i < 30; i++) byBytes.push(seg());
  t.equal(byBytes.heldBytes, 5_000);
  const huge = new ClipBuffer({ maxBytes: 10 });
  huge.push(seg());
  t.equal(huge.take(1)!.segments.length, 1, 'the newest segment stays even when over the byte bound');
  huge.clear();
  t.equal(huge.take(1), null);
});
