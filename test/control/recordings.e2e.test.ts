/**
 * Recording end to end on the real server (embedded default: API, media node, blob store): an
 * OBS-like publisher (libdatachannel, H.264) streams to a stream created with `record: true`, is
 * killed mid-recording and replaced by a new one (OBS reconnecting), then recording is turned
 * off. The result must be ONE recording with a discontinuity that ffprobe reads whole (duration
 * within one GOP of the time the output was live, increasing timestamps, a keyframe first, every
 * frame decodable), as an MP4 behind a signed link and as an HLS VOD playlist, and that hls.js
 * plays through to its end in Chromium. Also: validation names the field, list/get/delete,
 * DELETE of a recording being written is refused, ranges, another account sees nothing.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import t from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer, type Json, type LiveServer } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { increasing, probeRecording } from '../helpers/recordingProbe.ts';

const HLS_JS = readFileSync(createRequire(import.meta.url).resolve('hls.js/dist/hls.min.js'));
/** One GOP of the output: HLS segments (≈ 1 s) start on keyframes. */
const GOP_S = 1;
/** What a loaded machine adds to a measured interval (status polls, publisher teardown), s. */
const SLACK_S = 0.75;

async function waitOutput(api: LiveServer['api'], id: string, afterMs: number, seconds: number): Promise<number> {
  for (let i = 0; i < 600; i++) {
    const s = await api('GET', `/v1/streams/${id}/status`);
    const start = (s.body['data']?.['inference_status']?.['start_time'] as number | undefined) ?? 0;
    if (start > afterMs && Date.now() - start >= seconds * 1000) return start;
    await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  throw new Error(`no ${seconds} s of output`);
}

t.test('recording: a publisher killed and reconnected yields one recording that plays through', { timeout: 240_000 }, async (t) => {
  const { server, api, dataDir } = await startLiveServer(t, { env: { ROLES: 'api,media' } });

  for (const [body, field] of [[{ record: 'yes', params: { prompt: 'x' } }, 'record'], [{ record: 1 }, 'record']] as const) {
    const bad = await api('POST', '/v1/streams', body);
    t.equal(bad.status, 400, `${JSON.stringify(body)}: 400`);
    t.match(JSON.stringify(bad.body), field, 'names the field');
  }
  const created = await api('POST', '/v1/streams', { params: { prompt: 'recording', width: 384, height: 384, skip_diffusion: true }, record: true });
  t.equal(created.status, 201, JSON.stringify(created.body));
  t.equal(created.body['record'], true, 'record is echoed on the stream record');
  const id = created.body['id'] as string;
  const badPatch = await api('PATCH', `/v1/streams/${id}`, { record: 'no' });
  t.equal(badPatch.status, 400);
  t.match(JSON.stringify(badPatch.body), 'record', 'PATCH names the field');
  t.equal((await api('PATCH', `/v1/streams/${id}`, {})).status, 400, 'PATCH with neither params nor record: 400');
  t.same((await api('GET', `/v1/streams/${id}/recordings`)).body, { success: true, data: [] }, 'nothing recorded before a publisher');

  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 600, gop: 30 });
  const url = `${server.url}/live/${id}/whip`;
  const token = created.body['stream_key'] as string;
  const first = await pubs.publish({ url, token, source });
  t.equal(first.status, 201, 'first publisher live');
  const start1 = await waitOutput(api, id, 0, 6);

  // While recording: one recording, state recording, and it cannot be deleted.
  const during = await api('GET', `/v1/streams/${id}/recordings`);
  t.equal(during.body['data'].length, 1);
  const recId = during.body['data'][0]['id'] as string;
  t.equal(during.body['data'][0]['state'], 'recording');
  const refused = await api('DELETE', `/v1/streams/${id}/recordings/${recId}`);
  t.equal(refused.status, 409, 'a recording being written is not deleted');
  t.equal(refused.body['code'], 'RECORDINGS/ACTIVE');

  // The publisher dies without a word; OBS reconnects with a new session.
  const killedAt = Date.now();
  await pubs.vanish(first.id);
  const second = await pubs.publish({ url, token, source });
  t.equal(second.status, 201, 'the reconnecting publisher is live');
  const start2 = await waitOutput(api, id, killedAt, 5);
  const off = await api('PATCH', `/v1/streams/${id}`, { record: false });
  const stoppedAt = Date.now();
  t.equal(off.status, 200);
  t.equal(off.body['record'], false);
  const truthS = (killedAt - start1 + (stoppedAt - start2)) / 1000;

  let rec: Json = {};
  for (let i = 0; i < 100; i++) {
    rec = (await api('GET', `/v1/streams/${id}/recordings/${recId}`)).body;
    if (rec['state'] === 'complete') break;
    await new Promise((r) => setTimeout(r, 100)); // the node writes the last segments, then marks it complete
  }
  const list = await api('GET', `/v1/streams/${id}/recordings`);
  t.equal(list.body['data'].length, 1, 'ONE recording across the reconnect');
  t.match(rec, { id: recId, stream_id: id, state: 'complete', mp4_url: `${server.url}/v1/streams/${id}/recordings/${recId}.mp4`, hls_url: `${server.url}/v1/streams/${id}/recordings/${recId}.m3u8` });
  t.ok(rec['discontinuities'] >= 1, `${rec['discontinuities']} discontinuity`);
  t.ok(rec['size'] > 20_000, `${rec['size']} bytes`);
  t.ok(Math.abs(rec['duration'] - truthS) <= GOP_S + SLACK_S, `recorded ${rec['duration']} s of ${truthS.toFixed(2)} s live output (within one GOP)`);

  // The MP4: needs the key, 302 to a signed link.
  t.equal((await fetch(rec['mp4_url'] as string, { redirect: 'manual' })).status, 401, 'stable URL without a key: 401');
  const asked = Date.now();
  const redirect = await api('GET', new URL(rec['mp4_url'] as string).pathname);
  t.equal(redirect.status, 302);
  t.comment(`remux of ${rec['duration']} s to one MP4 took ${Date.now() - asked} ms`);
  const signed = new URL(redirect.headers.get('location') as string, server.url).toString();
  const file = await fetch(signed);
  t.equal(file.status, 200);
  t.equal(file.headers.get('content-type'), 'video/mp4');
  const bytes = Buffer.from(await file.arrayBuffer());
  const mp4 = join(dataDir, 'recording.mp4');
  writeFileSync(mp4, bytes);
  const p = await probeRecording(mp4);
  t.equal(p.width, 384);
  t.ok(p.audio, "an AAC track (the publisher's Opus silence, encoded to AAC)");
  t.ok(Math.abs(p.duration - rec['duration']) <= GOP_S, `MP4 duration ${p.duration} s agrees with the record's ${rec['duration']} s`);
  t.ok(p.packets[0]?.key, 'the first frame is a keyframe');
  t.ok(Math.abs(p.packets[0]?.pts ?? 99) < 0.1, 'timestamps start at zero');
  t.ok(increasing(p.packets.map((x) => x.pts)), `${p.packets.length} timestamps increase across the reconnect`);
  t.ok(p.packets.at(-1)!.pts <= p.duration, 'no gap for the time the publisher was away');
  t.equal(p.decodedFrames, p.packets.length, 'every frame decodes');
  const range = await fetch(signed, { headers: { range: 'bytes=0-99' } });
  t.equal(range.status, 206, 'byte ranges');
  t.same(Buffer.from(await range.arrayBuffer()), bytes.subarray(0, 100));
  t.equal((await fetch(signed.replace(/signature=[^&]+/, 'signature=bad'))).status, 403, 'a forged signature: 403');

  // The HLS VOD playlist: signed, with a discontinuity, read whole by ffprobe.
  const hls = await api('GET', new URL(rec['hls_url'] as string).pathname);
  t.equal(hls.status, 302);
  const playlistUrl = new URL(hls.headers.get('location') as string, server.url).toString();
  const text = await (await fetch(playlistUrl)).text();
  t.match(text, /#EXT-X-PLAYLIST-TYPE:VOD/);
  t.match(text, /#EXT-X-DISCONTINUITY\n/);
  t.match(text, /#EXT-X-ENDLIST/);
  const extinf = [...text.matchAll(/#EXTINF:([\d.]+),/g)].reduce((a, m) => a + Number(m[1]), 0);
  t.ok(Math.abs(extinf - rec['duration']) < 0.05, `playlist sums to ${extinf.toFixed(3)} s`);
  const ph = await probeRecording(playlistUrl);
  t.ok(ph.packets[0]?.key, 'HLS: the first frame is a keyframe');
  t.equal(ph.decodedFrames, ph.packets.length, `HLS: all ${ph.packets.length} frames decode`);
  t.equal(ph.packets.length, p.packets.length, 'the playlist and the MP4 hold the same frames');

  // hls.js plays it through in Chromium, across the discontinuity, without a fatal error.
  const ctx = await launchChromium(t, { fakeMedia: false });
  await ctx.route(`${server.url}/rec-page.html`, (r) => r.fulfill({ contentType: 'text/html', body: `<!doctype html><video id="v" muted playsinline></video><script src="/hls.min.js"></script>` }));
  await ctx.route(`${server.url}/hls.min.js`, (r) => r.fulfill({ body: HLS_JS, contentType: 'text/javascript' }));
  const page = await ctx.newPage();
  await page.goto(`${server.url}/rec-page.html`);
  const played = (await page.evaluate(
    (u) =>
      new Promise((resolve) => {
        const v = document.getElementById('v') as HTMLVideoElement;
        const errors: string[] = [];
        const w = window as unknown as { Hls: any };
        const hls = new w.Hls();
        hls.on(w.Hls.Events.ERROR, (_e: unknown, d: { details: string; fatal: boolean }) => {
          errors.push(`${d.details}${d.fatal ? ':fatal' : ''}`);
          if (d.fatal) resolve({ ended: false, errors, time: v.currentTime, duration: v.duration });
        });
        hls.loadSource(u);
        hls.attachMedia(v);
        v.playbackRate = 4;
        v.addEventListener('ended', () => resolve({ ended: true, errors, time: v.currentTime, duration: v.duration, frames: v.getVideoPlaybackQuality().totalVideoFrames }));
        void v.play();
        setTimeout(() => resolve({ ended: false, errors, time: v.currentTime, duration: v.duration }), 90_000);
      }),
    playlistUrl,
  )) as { ended: boolean; errors: string[]; time: number; duration: number; frames?: number };
  t.comment(`hls.js: ${JSON.stringify(played)}`);
  t.ok(played.ended, 'hls.js played the recording to its end');
  t.notOk(played.errors.some((e) => e.endsWith(':fatal')), 'no fatal hls.js error');
  t.ok(Math.abs(played.duration - rec['duration']) <= GOP_S, `the player's duration ${played.duration} s is the recording's`);

  // Recording again makes a second recording; another account sees none of it.
  t.equal((await api('PATCH', `/v1/streams/${id}`, { record: true })).body['record'], true);
  const other = await createAccountWithKey(server.store, 'pro');
  t.equal((await fetch(`${server.url}/v1/streams/${id}/recordings`, { headers: { authorization: `Bearer ${other.key}` } })).status, 404, "another account's key: 404");
  const missing = await api('GET', `/v1/streams/${id}/recordings/rec_nope`);
  t.equal(missing.status, 404);
  t.equal(missing.body['code'], 'RECORDINGS/NOT_FOUND');
  await pubs.stop(second.id);

  t.equal((await api('DELETE', `/v1/streams/${id}/recordings/${recId}`)).status, 200, 'a complete recording is deleted');
  t.equal((await api('GET', `/v1/streams/${id}/recordings/${recId}`)).status, 404);
  t.equal((await fetch(playlistUrl)).status, 404, 'its playlist went with it');
  t.equal((await api('DELETE', `/v1/streams/${id}`)).status, 200);
});
