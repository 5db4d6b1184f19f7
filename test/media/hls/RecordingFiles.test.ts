/**
 * The recording folder layout: segment file names round-trip every field the index needs, a
 * listing ignores temp files and segments without their init, and runs split where a recording
 * does not play on contiguously (a discontinuity, an init change, a lost segment).
 */
import t from 'tap';
import { parseSegmentFileName, readListing, segmentFileName } from '../../../media/hls/RecordingFiles.ts';
import { recordingRuns } from '../../../media/hls/RecordingMp4.ts';

t.test('segment names carry the index', async (t) => {
  const seg = { seq: 42, initId: 1, discontinuity: true, startMs: 123_456, durationMs: 1001, wallStartMs: 1_764_100_000_000, bytes: 187_000 };
  const name = segmentFileName(seg);
  t.match(name, /^s00000042-i1-d1-t123456-l1001-w1764100000000-b187000\.m4s$/);
  t.same(parseSegmentFileName(name), { name, ...seg });
  t.equal(parseSegmentFileName(`.${name}.tmp`), null, 'a temp file is not a segment');
  t.equal(parseSegmentFileName('meta.json'), null);
});

t.test('a listing is the playable index', async (t) => {
  const names = [
    segmentFileName({ seq: 2, initId: 0, discontinuity: false, startMs: 2000, durationMs: 1000, wallStartMs: 2, bytes: 10 }),
    segmentFileName({ seq: 0, initId: 0, discontinuity: false, startMs: 0, durationMs: 1000, wallStartMs: 0, bytes: 10 }),
    segmentFileName({ seq: 1, initId: 0, discontinuity: false, startMs: 1000, durationMs: 1000, wallStartMs: 1, bytes: 10 }),
    segmentFileName({ seq: 3, initId: 1, discontinuity: true, startMs: 9000, durationMs: 1000, wallStartMs: 9, bytes: 10 }),
    '.s00000004-i1-d0-t10000-l1000-w10-b10.m4s.tmp',
    'init-0.mp4',
    'meta.json',
  ];
  const { segments, inits } = readListing(names);
  t.same([...inits], [0]);
  t.same(segments.map((s) => s.seq), [0, 1, 2], 'in order; the segment whose init is missing and the temp file are left out');
});

t.test('runs split at discontinuities, init changes and lost segments', async (t) => {
  const mk = (seq: number, initId = 0, discontinuity = false) => ({ name: `s${seq}`, seq, initId, discontinuity, startMs: seq * 1000, durationMs: 1000, wallStartMs: seq, bytes: 1 });
  const runs = recordingRuns([mk(0), mk(1), mk(2, 0, true), mk(3), mk(5), mk(6, 1), mk(7, 1)]);
  t.same(runs.map((r) => r.map((s) => s.seq)), [[0, 1], [2, 3], [5], [6, 7]]);
});
