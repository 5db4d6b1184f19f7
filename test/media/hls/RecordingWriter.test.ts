/**
 * RecordingWriter on a real folder: it writes the publisher's frames only. A segment's live run is
 * written with its own length (the slate tail cut off), a slate segment is skipped, and the next
 * segment written after either follows a discontinuity; a recording of live segments alone has
 * none. The index is the folder listing (RecordingFiles.ts), read back as the API reads it.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t, { type Test } from 'tap';
import type { CompletedSegment } from '../../../media/hls/HlsPackager.ts';
import { readListing } from '../../../media/hls/RecordingFiles.ts';
import { RecordingWriter } from '../../../media/hls/RecordingWriter.ts';

let msn = 0;
/** A 1 s segment of 1000 bytes whose first `liveBytes` (each byte 1 ms of media) are live, the rest slate. */
const seg = (liveBytes: number): CompletedSegment => ({
  msn: msn,
  initId: 0,
  init: Buffer.from('init0'),
  bytes: Buffer.concat([Buffer.alloc(liveBytes, 'L'), Buffer.alloc(1000 - liveBytes, 'S')]),
  startMs: 1000 * msn,
  durationMs: 1000,
  wallStartMs: 1_700_000_000_000 + 1000 * msn++,
  discontinuity: false,
  liveBytes,
  liveDurationMs: liveBytes,
});

async function record(t: Test, segments: CompletedSegment[]): Promise<{ dir: string; writer: RecordingWriter }> {
  const dir = mkdtempSync(join(tmpdir(), 'rv-recw-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const writer = new RecordingWriter({ dir, id: 'rec_test', streamId: 'st', logger: pino({ level: 'silent' }) });
  for (const s of segments) writer.push(s);
  await writer.close();
  return { dir, writer };
}

t.test('the slate is left out: a live run is cut at the slate, a slate segment is skipped, the return is a discontinuity', { timeout: 30_000 }, async (t) => {
  // live, live then the slate, slate, slate, live (the publisher back), live then the slate (it left for good), slate.
  const { dir, writer } = await record(t, [seg(1000), seg(400), seg(0), seg(0), seg(1000), seg(250), seg(0)]);
  const { segments } = readListing(readdirSync(dir));
  t.same(
    segments.map((s) => ({ d: s.discontinuity, l: s.durationMs, b: s.bytes })),
    [
      { d: false, l: 1000, b: 1000 },
      { d: false, l: 400, b: 400 },
      { d: true, l: 1000, b: 1000 },
      { d: false, l: 250, b: 250 },
    ],
    'live runs only, one discontinuity at the return',
  );
  for (const s of segments) t.notOk(readFileSync(join(dir, s.name)).includes('S'), `${s.name}: no slate byte`);
  t.match(writer.stats, { segments: 4, bytes: 2650, durationMs: 2650, dropped: 0 });
});

t.test('a recording of live segments only is written whole, without a discontinuity', { timeout: 30_000 }, async (t) => {
  const { dir } = await record(t, [seg(1000), seg(1000), seg(1000)]);
  const { segments } = readListing(readdirSync(dir));
  t.same(
    segments.map((s) => [s.discontinuity, s.durationMs]),
    [
      [false, 1000],
      [false, 1000],
      [false, 1000],
    ],
  );
});
