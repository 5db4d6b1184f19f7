/**
 * Retention on the real server: with the account's recordings capped at ≈ 3 segments
 * (RECORDING_MAX_BYTES) and a sweep every 0.5 s, a stream recording live keeps losing its oldest
 * segments — and only those: what is left is always one unbroken run ending at the newest
 * segment, the newest segment is never deleted, and the writer never loses a segment (no gap in
 * its numbering, which a deleted file under it would make). Turning recording off lets the sweep
 * take the rest down to the limit; what is left still plays.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { parseSegmentFileName } from '../../media/index.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { probeRecording } from '../helpers/recordingProbe.ts';

const MAX_BYTES = 600_000;

t.test('retention deletes the oldest segments at the limit, never the one being written', { timeout: 180_000 }, async (t) => {
  const { server, api, dataDir } = await startLiveServer(t, { env: { ROLES: 'api,media', RECORDING_MAX_BYTES: MAX_BYTES, RECORDING_SWEEP_INTERVAL: 0.5 } });
  const created = await api('POST', '/v1/streams', { params: { prompt: 'retention', width: 384, height: 384, skip_diffusion: true }, record: true });
  t.equal(created.status, 201);
  const id = created.body['id'] as string;
  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source: await stampedH264({ size: 256, frames: 600, gop: 30 }) });
  t.equal(pub.status, 201);

  let recId = '';
  for (let i = 0; i < 600 && !recId; i++) {
    recId = ((await api('GET', `/v1/streams/${id}/recordings`)).body['data']?.[0]?.['id'] as string | undefined) ?? '';
    if (!recId) await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  t.ok(recId, 'recording started');
  const dir = join(dataDir, 'blobs', 'recordings', id, recId);

  // Watch the folder as the node writes and the sweep deletes, until the oldest 5 are gone.
  let newestSeen = -1;
  let maxSegBytes = 0;
  let worstOver = 0;
  let broken = '';
  let firstSeq = 0;
  for (let i = 0; i < 1200 && firstSeq < 5; i++) {
    const segs = readdirSync(dir).map(parseSegmentFileName).filter((s) => s !== null).sort((a, b) => a.seq - b.seq);
    if (segs.length > 0) {
      const newest = segs.at(-1)!.seq;
      firstSeq = segs[0]!.seq;
      if (newest < newestSeen) broken ||= `the newest segment ${newestSeen} was deleted`;
      newestSeen = Math.max(newestSeen, newest);
      if (segs.some((s, k) => k > 0 && s.seq !== segs[k - 1]!.seq + 1)) broken ||= `a hole in ${segs.map((s) => s.seq).join(',')}`;
      const total = segs.reduce((a, s) => a + s.bytes, 0);
      maxSegBytes = Math.max(maxSegBytes, ...segs.map((s) => s.bytes));
      worstOver = Math.max(worstOver, total - MAX_BYTES);
    }
    await new Promise((r) => setTimeout(r, 50)); // poll interval
  }
  t.ok(firstSeq >= 5, `the oldest segments were deleted (first kept: ${firstSeq}, newest: ${newestSeen})`);
  t.equal(broken, '', 'always one unbroken run ending at the newest segment');
  // Between two sweeps (0.5 s) the node adds at most one segment (≈ 1 s) beyond the limit.
  t.ok(worstOver <= 2 * maxSegBytes, `at most ${worstOver} bytes over the limit (segments ≤ ${maxSegBytes} bytes)`);
  const rec = (await api('GET', `/v1/streams/${id}/recordings/${recId}`)).body;
  t.equal(rec['state'], 'recording', 'still recording');
  t.equal(rec['discontinuities'], 0, 'the writer lost nothing under the sweep');

  t.equal((await api('PATCH', `/v1/streams/${id}`, { record: false })).status, 200);
  let done: any = null;
  for (let i = 0; i < 200; i++) {
    done = (await api('GET', `/v1/streams/${id}/recordings/${recId}`)).body;
    if (done['state'] === 'complete' && done['size'] <= MAX_BYTES) break;
    await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  t.equal(done['state'], 'complete');
  t.ok(done['size'] <= MAX_BYTES, `complete and within the limit: ${done['size']} bytes, ${done['segments']} segments`);
  const redirect = await api('GET', `/v1/streams/${id}/recordings/${recId}.mp4`);
  t.equal(redirect.status, 302);
  const p = await probeRecording(new URL(redirect.headers.get('location') as string, server.url).toString());
  t.ok(p.packets[0]?.key, 'what retention left starts on a keyframe');
  t.equal(p.decodedFrames, p.packets.length, 'and every frame decodes');
  await pubs.stop(pub.id);
});
