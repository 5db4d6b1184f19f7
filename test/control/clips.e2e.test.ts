/**
 * Clips end to end on the real server (embedded default: API, media node, blob store): an
 * OBS-like publisher (libdatachannel, H.264) streams; `POST …/clips` cuts the last N seconds from
 * the node's segment buffer; the MP4 behind the signed link is checked with ffprobe/ffmpeg
 * (duration within one segment of what was asked, timestamps from zero and increasing, a keyframe
 * first, every frame decodable); ranges, list, get, delete, validation and the not-live case.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer, type Json } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';

/** Video packets of an MP4: pts (s) and whether each is a keyframe, in file order. */
function packets(file: string): { pts: number; key: boolean }[] {
  const out = execFileSync('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'packet=pts_time,flags', '-of', 'csv=p=0', file], { encoding: 'utf8' });
  return out
    .trim()
    .split('\n')
    .map((l) => l.split(','))
    .map(([pts, flags]) => ({ pts: Number(pts), key: (flags ?? '').includes('K') }));
}

t.test('clips: the last N seconds of a live stream as an MP4 behind a signed link', { timeout: 180_000 }, async (t) => {
  const { server, api, dataDir } = await startLiveServer(t, { env: { ROLES: 'api,media' } });

  const created = await api('POST', '/v1/streams', { params: { prompt: 'clips', width: 384, height: 384, skip_diffusion: true } });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body['id'] as string;

  // Before any publisher: nothing to clip.
  const early = await api('POST', `/v1/streams/${id}/clips`, { seconds: 5 });
  t.equal(early.status, 409, 'no live output yet: 409');
  t.equal(early.body['code'], 'CLIPS/NOT_LIVE');

  for (const [body, field] of [[{ seconds: 0 }, 'seconds'], [{ seconds: 61 }, 'seconds'], [{ seconds: 'ten' }, 'seconds'], [{}, 'seconds'], [{ seconds: 5, extra: 1 }, 'extra']] as const) {
    const bad = await api('POST', `/v1/streams/${id}/clips`, body);
    t.equal(bad.status, 400, `${JSON.stringify(body)}: 400`);
    t.match(JSON.stringify(bad.body), field, `${JSON.stringify(body)}: names the field`);
  }
  t.equal((await api('POST', '/v1/streams/str_nope/clips', { seconds: 5 })).status, 404, 'unknown stream: 404');

  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 300 });
  const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source });
  t.equal(pub.status, 201, 'publisher live');
  // The stream's own report says when 12 s of output exist (start_time is its first output frame).
  let startTime = 0;
  for (let i = 0; i < 300; i++) {
    const s = await api('GET', `/v1/streams/${id}/status`);
    startTime = (s.body['data']?.['inference_status']?.['start_time'] as number | undefined) ?? 0;
    if (startTime > 0 && Date.now() - startTime >= 12_500) break;
    await new Promise((r) => setTimeout(r, 200)); // poll interval
  }
  t.ok(startTime > 0 && Date.now() - startTime >= 12_500, 'the stream has produced 12 s of output');
  const live = await api('GET', `/v1/streams/${id}/status`);
  t.equal(live.body['data']?.['output'], 'live', 'status: the output carries the live picture (not the slate)');
  const pidOutput = await fetch(`${server.url}/v1/playback/${created.body['output_playback_id'] as string}/output`);
  t.same(((await pidOutput.json()) as Json)['data'], { output: 'live' }, 'the key-less output state by playback id agrees');

  const asked = Date.now();
  const clip = await api('POST', `/v1/streams/${id}/clips`, { seconds: 10 });
  const tookMs = Date.now() - asked;
  t.equal(clip.status, 201, 'clip created');
  t.comment(`a 10 s clip was ready ${tookMs} ms after the request`);
  const c = clip.body;
  t.match(c, { stream_id: id, seconds: 10, id: /^clp_/ });
  // At least what was asked, up to one segment more (segments are ≈ 1 s; a slow machine stretches them).
  t.ok(c['duration'] >= 10 && c['duration'] <= 12.5, `duration ${c['duration']} s: 10 s and at most a segment more`);
  t.ok(c['size'] > 10_000, `size ${c['size']} bytes`);
  t.equal(c['mp4_url'], `${server.url}/v1/streams/${id}/clips/${c['id']}.mp4`);

  // The stable URL needs the key and redirects to a signed link that needs none.
  t.equal((await fetch(c['mp4_url'] as string, { redirect: 'manual' })).status, 401, 'stable URL without a key: 401');
  const redirect = await api('GET', new URL(c['mp4_url'] as string).pathname);
  t.equal(redirect.status, 302);
  const signed = new URL(redirect.headers.get('location') as string, server.url).toString();
  const file = await fetch(signed);
  t.equal(file.status, 200);
  t.equal(file.headers.get('content-type'), 'video/mp4');
  const bytes = Buffer.from(await file.arrayBuffer());
  t.equal(bytes.length, c['size'], 'the size the record says');
  const path = join(dataDir, 'clip.mp4');
  writeFileSync(path, bytes);

  const probed = JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-show_format', '-show_streams', '-of', 'json', path], { encoding: 'utf8' })) as Json;
  t.match(probed['format']['format_name'], /mp4/);
  const video = (probed['streams'] as Json[]).find((s) => s['codec_type'] === 'video');
  t.equal(video?.['codec_name'], 'h264');
  t.equal(video?.['width'], 384);
  const duration = Number(probed['format']['duration']);
  t.ok(Math.abs(duration - c['duration']) < 0.5, `ffprobe duration ${duration} s agrees with the record's ${c['duration']} s`);
  const pk = packets(path);
  t.ok(pk.length > 100, `${pk.length} video packets (30 fps in, fewer out on a loaded machine)`);
  t.ok(pk[0]?.key, 'the first frame is a keyframe');
  t.ok(Math.abs(pk[0]?.pts ?? 99) < 0.1, `timestamps start at zero (${pk[0]?.pts})`);
  const sorted = pk.map((p) => p.pts);
  t.ok(sorted.every((v, i) => i === 0 || v > (sorted[i - 1] as number)), 'timestamps increase');
  const decoded = execFileSync('ffmpeg', ['-v', 'error', '-i', path, '-map', '0:v', '-fps_mode', 'passthrough', '-f', 'framemd5', '-'], { encoding: 'utf8' });
  t.equal(decoded.split('\n').filter((l) => /^\d/.test(l)).length, pk.length, 'every frame decodes, from the first');

  const range = await fetch(signed, { headers: { range: 'bytes=100-199' } });
  t.equal(range.status, 206, 'byte ranges for seeking');
  t.equal(range.headers.get('content-range'), `bytes 100-199/${c['size']}`);
  t.same(Buffer.from(await range.arrayBuffer()), bytes.subarray(100, 200));
  const past = await fetch(signed, { headers: { range: `bytes=${c['size']}-` } });
  t.equal(past.status, 416, 'a range past the end: 416');
  t.equal(past.headers.get('content-range'), `bytes */${c['size']}`);
  t.equal(((await past.json()) as { code: string }).code, 'REQUEST/RANGE_NOT_SATISFIABLE', 'in the Area B envelope');
  t.equal((await fetch(signed.replace(/signature=[^&]+/, 'signature=bad'))).status, 403, 'a forged signature: 403');

  const short = await api('POST', `/v1/streams/${id}/clips`, { seconds: 2 });
  t.equal(short.status, 201);
  t.ok(short.body['duration'] >= 2 && short.body['duration'] <= 4.5, `a 2 s clip is ${short.body['duration']} s`);

  const list = await api('GET', `/v1/streams/${id}/clips`);
  t.same(list.body['data'].map((x: Json) => x['id']), [short.body['id'], c['id']], 'listed newest first');
  t.same((await api('GET', `/v1/streams/${id}/clips/${c['id']}`)).body, c, 'fetched as created');
  // The key-less list by playback id (the viewer page's): same clips, signed links, no stream id.
  const pid = created.body['output_playback_id'] as string;
  const byPlayback = await fetch(`${server.url}/v1/playback/${pid}/clips`);
  t.equal(byPlayback.status, 200, 'clips by playback id need no key');
  const pub0 = ((await byPlayback.json()) as Json)['data'] as Json[];
  t.same(pub0.map((x) => x['id']), [short.body['id'], c['id']], 'the same clips, newest first');
  t.notOk('stream_id' in (pub0[0] ?? {}), 'no stream id in the public list');
  const viaLink = await fetch(new URL(pub0[1]?.['url'] as string, server.url));
  t.equal(viaLink.status, 200, 'its signed link serves the MP4');
  t.equal(viaLink.headers.get('content-type'), 'video/mp4');
  const unknownPid = await fetch(`${server.url}/v1/playback/0123456789abcdef01234567/clips`);
  t.equal(unknownPid.status, 404, 'unknown playback id: 404');
  t.equal(((await unknownPid.json()) as Json)['code'], 'STREAMS/NOT_FOUND');
  const badPid = await fetch(`${server.url}/v1/playback/${encodeURIComponent('bad id!')}/clips`);
  t.equal(badPid.status, 400, 'a malformed playback id: 400');
  t.match(await badPid.text(), 'playbackId', 'naming the field');

  t.equal((await api('DELETE', `/v1/streams/${id}/clips/${short.body['id']}`)).status, 200);
  const gone = await api('GET', `/v1/streams/${id}/clips/${short.body['id']}`);
  t.equal(gone.status, 404);
  t.equal(gone.body['code'], 'CLIPS/NOT_FOUND');
  t.equal((await api('GET', `/v1/streams/${id}/clips/clp_x.mp4`)).status, 404, 'unknown clip MP4: 404');

  // Another account sees none of it.
  const other = await createAccountWithKey(server.store, 'pro');
  const foreign = await fetch(`${server.url}/v1/streams/${id}/clips`, { headers: { authorization: `Bearer ${other.key}` } });
  t.equal(foreign.status, 404, "another account's key: 404");

  // Deleting the stream deletes its clips.
  t.equal((await api('DELETE', `/v1/streams/${id}`)).status, 200);
  t.equal((await fetch(signed)).status, 404, 'the clip file went with the stream');
});
