/**
 * The stream hub on its own: readers made through it get the tracks they implement, their demand
 * sums, a reader that throws is reported once through the hub's `error` event while the others
 * still get the track, and closing waits for what a reader writes.
 */
import t from 'tap';
import pino from 'pino';
import { StreamHub, type ReaderContext, type ReaderStatus, type StreamReader } from '../../../media/index.ts';
import type { EncodedAccessUnit } from '../../../media/gst/EncoderBin.ts';

const logger = pino({ level: 'silent' });

function hub(changed: () => void = () => undefined): { hub: StreamHub; keyUnits: () => number } {
  let keyUnits = 0;
  const h = new StreamHub({
    streamId: 'str_hub',
    requestKeyUnit: () => keyUnits++,
    requestSourceKeyframe: () => undefined,
    rtpTimestamp: (ptsMs) => Math.round(ptsMs * 90) >>> 0,
    changed,
    logger,
  });
  return { hub: h, keyUnits: () => keyUnits };
}

const au = (pts: number, keyframe = false): EncodedAccessUnit => ({ nals: [new Uint8Array([0x65, pts])], keyframe, pts, ptsMs: pts * 33, atMs: pts * 33, encodeMs: 1 });

/** Takes video and AAC, records what it got; `watched` and `wantsAac` are set by the test. */
class Recorder implements StreamReader {
  readonly name: string;
  watched = false;
  wantsAac = false;
  readonly video: (au: EncodedAccessUnit, slate: boolean) => void;
  readonly got: { pts: number; slate: boolean }[] = [];
  readonly aacAt: number[] = [];
  closed = false;
  constructor(
    readonly ctx: ReaderContext,
    name = 'recorder',
  ) {
    this.name = name;
    this.video = (a, slate) => this.got.push({ pts: a.pts, slate });
  }
  aac(_frame: Uint8Array, atMs: number): void {
    this.aacAt.push(atMs);
  }
  status(): ReaderStatus {
    return { kind: 'recorder', watched: this.watched, consumers: this.watched ? 1 : 0 };
  }
  close(): Promise<void> {
    return new Promise((resolve) =>
      setImmediate(() => {
        this.closed = true;
        resolve();
      }),
    );
  }
}

t.test('readers get the tracks they implement, in the order of the stream', async (t) => {
  const { hub: h, keyUnits } = hub();
  const a = h.add((ctx) => new Recorder(ctx, 'a'));
  // A reader that takes only frames: video and AAC pass it by.
  const frames: number[] = [];
  h.add(() => ({ name: 'frames', watched: false, frame: (_f, ptsMs) => frames.push(ptsMs), status: () => ({ kind: 'frames', watched: false, consumers: 0 }), close: () => undefined }));
  h.video(au(1, true), false);
  h.video(au(2), true);
  h.aac(new Uint8Array(4), 123);
  h.frame({ width: 2, height: 2, data: new Uint8Array(6), ptsMs: 66 }, 66);
  t.same(a.got, [
    { pts: 1, slate: false },
    { pts: 2, slate: true },
  ]);
  t.same(a.aacAt, [123]);
  t.same(frames, [66]);
  a.ctx.requestKeyUnit();
  t.equal(keyUnits(), 1, "a reader's key unit request reaches the stream's encoder");
  t.equal(a.ctx.rtpTimestamp(1000), 90_000, 'one RTP clock for every reader');
  t.same(Object.keys(h.status()), ['a', 'frames'], 'status lists every reader by name, in the order added');
  t.same(h.status()['a'], { kind: 'recorder', watched: false, consumers: 0 });
});

t.test("demand is the readers' sum, and a change is told to the stream", async (t) => {
  let changes = 0;
  const { hub: h } = hub(() => changes++);
  const a = h.add((ctx) => new Recorder(ctx, 'a'));
  const b = h.add((ctx) => new Recorder(ctx, 'b'));
  t.equal(changes, 2, 'each add is a change');
  t.equal(h.watched, false);
  t.equal(h.wantsAac, false);
  t.equal(h.holds, false);
  b.watched = true;
  a.wantsAac = true;
  a.ctx.changed();
  t.equal(changes, 3);
  t.equal(h.watched, true, 'watched while any reader is');
  t.equal(h.wantsAac, true, 'AAC while any reader wants it');
  t.equal(h.wantsOpus, false);
  t.ok(h.remove('b'));
  t.equal(h.watched, false, 'a removed reader no longer counts');
  t.equal(changes, 4, 'a removal is a change');
  t.equal(h.remove('b'), false, 'removing twice: nothing to remove');
});

t.test('one failing reader is reported and the others still get the track', async (t) => {
  const { hub: h } = hub();
  const errors: string[] = [];
  h.on('error', (m) => errors.push(m));
  h.add(() => ({
    name: 'broken',
    watched: false,
    video: () => {
      throw new Error('muxer broke');
    },
    status: () => ({ kind: 'broken', watched: false, consumers: 0 }),
    close: () => undefined,
  }));
  const ok = h.add((ctx) => new Recorder(ctx, 'ok'));
  h.video(au(7), false);
  t.same(ok.got, [{ pts: 7, slate: false }], 'the reader after the broken one got the access unit');
  t.same(errors, ['broken: muxer broke'], "one error event, naming the reader");
  ok.ctx.error('disk full');
  t.same(errors[1], 'disk full', "a reader's own error goes through the same event");
});

t.test('names are unique, find is by class, close waits for what readers write', async (t) => {
  const { hub: h } = hub();
  const a = h.add((ctx) => new Recorder(ctx, 'a'));
  t.throws(() => h.add((ctx) => new Recorder(ctx, 'a')), /a reader named a exists/);
  t.equal(h.find(Recorder), a, 'found by its class');
  t.equal(h.get('a'), a);
  t.equal(h.get('nope'), null);
  h.close();
  t.equal(a.closed, false, 'its close is still writing');
  await h.ended();
  t.equal(a.closed, true, 'ended() waited for it');
  t.same(h.status(), {}, 'a closed hub holds no reader');
  t.throws(() => h.add((ctx) => new Recorder(ctx, 'late')), /stream closed/, 'a closed hub takes no reader');
});
