/**
 * Retention by age on the real server: with every account's segments capped at 3.6 s of age
 * (RECORDING_MAX_AGE_HOURS=0.001, the smallest the config allows) and a sweep every 0.5 s,
 *
 * - while a stream records, its segments older than the cap keep going and nothing younger does
 *   (the oldest kept segment ended within the cap, give or take a sweep and the machine's lag);
 * - a completed recording whose segments have all aged out is deleted whole;
 * - a recording still being written keeps its newest segment however old it gets (here: the
 *   publisher left, so no new segment comes and the newest one ages past the cap) — the live edge
 *   of its playlist and the segment the writer continues after.
 *
 * Real time, no injected clock: the cap is seconds, so the test waits (polling) for ages to pass.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { parseSegmentFileName, type RecordingSegmentFile } from '../../media/index.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer, type LiveServer } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';

const MAX_AGE_H = 0.001;
const MAX_AGE_MS = MAX_AGE_H * 3600_000;
const SWEEP_S = 0.5;
/** What a loaded machine adds between a segment ageing out and the sweep seeing it, ms. */
const LAG_MS = 2500;

function segments(dir: string): RecordingSegmentFile[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).map(parseSegmentFileName).filter((s) => s !== null).sort((a, b) => a.seq - b.seq);
}

async function activeRecording(api: LiveServer['api'], id: string, not: string): Promise<string> {
  for (let i = 0; i < 600; i++) {
    const list = (await api('GET', `/v1/streams/${id}/recordings`)).body['data'] as Array<Record<string, unknown>> | undefined;
    const rec = list?.find((r) => r['state'] === 'recording' && r['id'] !== not && (r['segments'] as number) > 0);
    if (rec) return rec['id'] as string;
    await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  return '';
}

t.test('retention by age: old segments go, a finished recording goes whole, the live edge stays', { timeout: 180_000 }, async (t) => {
  const { server, api, dataDir } = await startLiveServer(t, { env: { ROLES: 'api,media', RECORDING_MAX_AGE_HOURS: MAX_AGE_H, RECORDING_SWEEP_INTERVAL: SWEEP_S } });
  const created = await api('POST', '/v1/streams', { params: { prompt: 'age', width: 384, height: 384, skip_diffusion: true }, record: true });
  t.equal(created.status, 201);
  const id = created.body['id'] as string;
  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source: await stampedH264({ size: 256, frames: 600, gop: 30 }) });
  t.equal(pub.status, 201);

  const first = await activeRecording(api, id, '');
  t.ok(first, 'recording started');
  const firstDir = join(dataDir, 'blobs', 'recordings', id, first);

  // While recording: watch until the oldest 3 segments aged out and were swept.
  let firstSeq = 0;
  let newestSeen = -1;
  let tooOld = '';
  let tooEarly = '';
  for (let i = 0; i < 600 && firstSeq < 3; i++) {
    const segs = segments(firstDir);
    const now = Date.now();
    if (segs.length > 0) {
      const oldest = segs[0]!;
      if (oldest.seq > 0 && oldest.seq !== firstSeq) {
        // Segment oldest.seq - 1 was just deleted: it must have aged out (it ended before this one started).
        if (now - oldest.wallStartMs < MAX_AGE_MS - 50) tooEarly ||= `segment ${oldest.seq - 1} went while it ended ${now - oldest.wallStartMs} ms ago`;
      }
      firstSeq = oldest.seq;
      const age = now - (oldest.wallStartMs + oldest.durationMs);
      if (age > MAX_AGE_MS + SWEEP_S * 1000 + LAG_MS) tooOld ||= `segment ${oldest.seq} kept ${age} ms after it ended`;
      if (segs.at(-1)!.seq < newestSeen) tooOld ||= 'the newest segment went';
      newestSeen = Math.max(newestSeen, segs.at(-1)!.seq);
    }
    await new Promise((r) => setTimeout(r, 50)); // poll interval
  }
  t.ok(firstSeq >= 3, `aged segments were deleted while recording (first kept: ${firstSeq}, newest: ${newestSeen})`);
  t.equal(tooEarly, '', 'no segment went before it was older than the cap');
  t.equal(tooOld, '', 'no segment stayed long past the cap');

  // Finish the first recording and start a second one on the same stream.
  t.equal((await api('PATCH', `/v1/streams/${id}`, { record: false })).status, 200);
  t.equal((await api('PATCH', `/v1/streams/${id}`, { record: true })).status, 200);
  const second = await activeRecording(api, id, first);
  t.ok(second, 'a second recording started');
  const secondDir = join(dataDir, 'blobs', 'recordings', id, second);
  // The publisher leaves: the second recording stays open (the stream lives on) and gets no new segment.
  await pubs.stop(pub.id);

  let newestAge = 0;
  let firstGone = false;
  let left: RecordingSegmentFile[] = [];
  for (let i = 0; i < 400; i++) {
    firstGone = !existsSync(firstDir);
    left = segments(secondDir);
    const newest = left.at(-1);
    newestAge = newest ? Date.now() - (newest.wallStartMs + newest.durationMs) : 0;
    // Done once the newest segment is well past the cap (several sweeps have seen it as old) and the first recording went.
    if (firstGone && newestAge > MAX_AGE_MS + 4 * SWEEP_S * 1000) break;
    await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  t.ok(firstGone, 'the completed recording, all of it aged out, was deleted whole');
  t.equal((await api('GET', `/v1/streams/${id}/recordings/${first}`)).status, 404, 'and the API no longer lists it');
  t.ok(newestAge > MAX_AGE_MS + 4 * SWEEP_S * 1000, `the open recording's newest segment aged past the cap (${newestAge} ms)`);
  t.equal(left.length, 1, `only its newest segment is left (${left.map((s) => s.seq).join(',')})`);
  const rec = (await api('GET', `/v1/streams/${id}/recordings/${second}`)).body;
  t.equal(rec['state'], 'recording', 'the open recording is still being written');
  t.equal(rec['segments'], 1);
});
