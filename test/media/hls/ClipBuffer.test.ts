import t from 'tap';
import { ClipBuffer } from '../../../media/hls/ClipBuffer.ts';
import type { CompletedSegment } from '../../../media/hls/HlsPackager.ts';

let msn = 0;
/** Media time where the next segment starts, ms: segments follow each other, as HlsPackager makes them. */
let clock = 0;
/** Wall time the media was away (stalls, reconnects) so far, ms: cut out of the media timeline. */
let away = 0;
const seg = (o: Partial<CompletedSegment> & { gapMs?: number } = {}): CompletedSegment => {
  const { gapMs = 0, ...rest } = o;
  away += gapMs;
  const s: CompletedSegment = {
    msn: msn++,
    initId: 0,
    init: Buffer.from('init0'),
    bytes: Buffer.alloc(1000),
    startMs: clock,
    durationMs: 1000,
    wallStartMs: 1_000_000 + clock + away,
    discontinuity: gapMs > 0,
    liveBytes: 1000,
    liveDurationMs: 1000,
    ...rest,
  };
  clock = s.startMs + s.durationMs;
  return s;
};

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

t.test('uneven segments: at least what was asked, never a segment more than needed', async (t) => {
  const b = new ClipBuffer();
  for (const d of [2000, 2000, 2000, 600]) b.push(seg({ durationMs: d }));
  t.equal(b.take(3)!.durationMs, 4600, '3 s asked: 0.6 + 2 + 2 s (0.6 + 2 s would cut the start off)');
  t.equal(b.take(2.6)!.durationMs, 2600, 'exactly covered: nothing more');
});

t.test('a clip stops at an init change; a gap (stall, reconnect) is not in it, as it is not in the live timeline', async (t) => {
  const b = new ClipBuffer();
  for (let i = 0; i < 5; i++) b.push(seg({ initId: 1, init: Buffer.from('init1') }));
  for (let i = 0; i < 3; i++) b.push(seg({ initId: 2, init: Buffer.from('init2') }));
  const c = b.take(10)!;
  t.equal(c.segments.length, 3, 'only the segments of the newest init');
  t.equal(c.init.toString(), 'init2');
  b.push(seg({ initId: 2, init: Buffer.from('init2'), gapMs: 4000 }));
  b.push(seg({ initId: 2, init: Buffer.from('init2') }));
  const g = b.take(10)!;
  t.equal(g.durationMs, 5000, '3 s, a 4 s gap, 2 s: 5 s of media');
  t.equal(g.segments.length, 5);
  t.equal(g.startedAtMs, g.segments[0]!.wallStartMs, 'started_at is the wall time of its first frame');
  const h = b.take(4)!;
  t.equal(h.durationMs, 4000, 'asked 4 s: 4 segments across the gap');
  t.equal(h.startedAtMs, g.segments[1]!.wallStartMs);
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
