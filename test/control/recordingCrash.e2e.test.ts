/**
 * Crash safety: `kill -9` of the server process (`reverie serve`, embedded default: API and media
 * node in one) while it records leaves, after a restart on the same DATA_DIR, a recording in
 * state `interrupted` that holds every segment completed before the kill — no partial file
 * listed, no repair step — and plays up to its last complete segment: the MP4 and the VOD
 * playlist read whole in ffprobe (keyframe first, increasing timestamps, every frame decodes).
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { freePort } from '../helpers/net.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { increasing, probeRecording } from '../helpers/recordingProbe.ts';
import { startServerProcess } from '../helpers/serverProcess.ts';

t.test('kill -9 mid-recording leaves a recording that plays up to its last complete segment', { timeout: 240_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-rec-crash-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const env = { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', PUBLIC_URL: `http://127.0.0.1:${port}` };
  const a = await startServerProcess(t, { env, timeoutMs: 90_000 });

  const created = await a.api('POST', '/v1/streams', { params: { prompt: 'crash', width: 384, height: 384, skip_diffusion: true }, record: true });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id as string;
  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: `${a.url}/live/${id}/whip`, token: created.body.stream_key as string, source: await stampedH264({ size: 256, frames: 600, gop: 30 }) });
  t.equal(pub.status, 201, 'publisher live');

  // Until the node has written a few segments (it writes one every ≈ 1 s).
  let rec: any = null;
  for (let i = 0; i < 600 && !(rec?.segments >= 5); i++) {
    rec = (await a.api('GET', `/v1/streams/${id}/recordings`)).body.data?.[0] ?? null;
    if (!(rec?.segments >= 5)) await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  t.ok(rec?.segments >= 5, `${rec?.segments} segments written`);
  t.equal(rec.state, 'recording');
  const dir = join(dataDir, 'blobs', 'recordings', id, rec.id);

  const exited = new Promise((r) => a.child.once('exit', r));
  a.child.kill('SIGKILL');
  await exited;
  await pubs.vanish(pub.id);
  const names = readdirSync(dir);
  const complete = names.filter((n) => n.endsWith('.m4s') && !n.startsWith('.'));
  t.comment(`on disk after the kill: ${complete.length} segments, temp files: ${names.filter((n) => n.startsWith('.')).join(', ') || 'none'}`);
  t.ok(complete.length >= rec.segments, 'every segment listed before the kill is still there');

  const b = await startServerProcess(t, { env, key: a.key, timeoutMs: 90_000 });
  const after = (await b.api('GET', `/v1/streams/${id}/recordings/${rec.id}`)).body;
  t.equal(after.state, 'interrupted', 'the recording is interrupted, not recording');
  t.equal(after.segments, complete.length, 'it holds every complete segment');
  t.ok(after.ended_at !== null, 'it has an end: its last complete segment');

  const mp4Redirect = await fetch(`${b.url}/v1/streams/${id}/recordings/${rec.id}.mp4`, { headers: { authorization: `Bearer ${a.key}` }, redirect: 'manual' });
  t.equal(mp4Redirect.status, 302);
  const mp4 = join(dataDir, 'crash.mp4');
  writeFileSync(mp4, Buffer.from(await (await fetch(new URL(mp4Redirect.headers.get('location') as string, b.url))).arrayBuffer()));
  const p = await probeRecording(mp4);
  t.ok(Math.abs(p.duration - after.duration) <= 1, `MP4 ${p.duration} s, recording ${after.duration} s`);
  t.ok(p.packets[0]?.key, 'the first frame is a keyframe');
  t.ok(increasing(p.packets.map((x) => x.pts)), 'timestamps increase');
  t.equal(p.decodedFrames, p.packets.length, `all ${p.packets.length} frames decode`);

  const hlsRedirect = await fetch(`${b.url}/v1/streams/${id}/recordings/${rec.id}.m3u8`, { headers: { authorization: `Bearer ${a.key}` }, redirect: 'manual' });
  const playlist = new URL(hlsRedirect.headers.get('location') as string, b.url).toString();
  const text = await (await fetch(playlist)).text();
  t.match(text, /#EXT-X-PLAYLIST-TYPE:VOD[\s\S]*#EXT-X-ENDLIST/, 'a finished VOD playlist');
  const ph = await probeRecording(playlist);
  t.equal(ph.packets.length, p.packets.length, 'the playlist holds the same frames');
  t.equal(ph.decodedFrames, ph.packets.length, 'and every one decodes');
});
