/**
 * Recording in scale-out, everything real: redis-server, one `api` and one `media` process of
 * `reverie serve --roles …` sharing DATA_DIR (the shared blob directory), an OBS-like publisher over
 * WHIP through the api (forwarded to the node). The media process writes the recording; the api
 * process lists it (its state read from the node over the bus), ends it with a PATCH relayed to
 * the node, and serves the remuxed MP4 behind a signed link, which ffprobe reads whole.
 */
import t from 'tap';
import { increasing, probeRecording } from '../helpers/recordingProbe.ts';
import { Cluster, type Json } from './cluster.ts';

/** One GOP of the output (HLS segments of ≈ 1 s start on keyframes), s. */
const GOP_S = 1;

t.test('scale-out: record on, publish, stop through the api process; the MP4 it serves plays', { timeout: 240_000 }, async (t) => {
  const c = await Cluster.start(t);
  const media = await c.spawn('media1', 'media');
  const api = await c.spawn('api1', 'api');
  await c.until('the media node registered', async () => (await c.store.nodes.list('media')).length === 1);

  const created = await c.api(api, 'POST', '/v1/streams', { params: { prompt: 'scale-out recording', width: 384, height: 384, skip_diffusion: true }, record: true });
  t.equal(created.status, 201, created.status === 201 ? 'created through the api' : JSON.stringify(created.body));
  const id = created.body['id'] as string;
  t.equal(created.body['record'], true);
  const pub = await c.publish(`${api.url}/live/${id}/whip`, created.body['stream_key'] as string);
  t.equal(pub.status, 201, 'WHIP through the api → 201');
  t.match(pub.location, new RegExp(`^${media.url}/live/sessions/`), 'the session is on the media process');

  // At least 4 s recorded, as the api process sees it.
  const rec = await c.until(
    '4 s of recording listed by the api',
    async () => {
      const list = (await c.api(api, 'GET', `/v1/streams/${id}/recordings`)).body['data'] as Json[] | undefined;
      const r = list?.[0];
      return r && r['state'] === 'recording' && (r['duration'] as number) >= 4 ? r : null;
    },
    90_000,
  );
  t.equal(rec['stream_id'], id);

  t.equal((await c.api(api, 'PATCH', `/v1/streams/${id}`, { record: false })).status, 200, 'record off through the api');
  const done = await c.until(
    'the recording complete',
    async () => {
      const r = (await c.api(api, 'GET', `/v1/streams/${id}/recordings/${rec['id'] as string}`)).body;
      return r['state'] === 'complete' ? r : null;
    },
    30_000,
  );
  pub.stop();
  t.ok((done['duration'] as number) >= 4, `complete: ${done['duration']} s, ${done['segments']} segments, ${done['size']} bytes`);
  t.equal(done['discontinuities'], 0);

  const redirect = await fetch(`${api.url}/v1/streams/${id}/recordings/${rec['id'] as string}.mp4`, { headers: { authorization: `Bearer ${c.key}` }, redirect: 'manual' });
  t.equal(redirect.status, 302, 'the stable MP4 URL answers 302');
  await redirect.text();
  const signed = new URL(redirect.headers.get('location') as string, api.url).toString();
  const p = await probeRecording(signed);
  t.ok(p.packets[0]?.key, 'the first frame is a keyframe');
  t.ok(increasing(p.packets.map((x) => x.pts)), `${p.packets.length} timestamps increase`);
  t.equal(p.decodedFrames, p.packets.length, 'every frame decodes');
  t.equal(p.width, 384, 'the processed output, at the stream size');
  t.ok(Math.abs(p.duration - (done['duration'] as number)) <= GOP_S, `MP4 duration ${p.duration} s within one GOP of the recording's ${done['duration']} s`);
  const playlist = await fetch(new URL((await c.api(api, 'GET', `/v1/streams/${id}/recordings/${rec['id'] as string}/links`)).body['hls_url'] as string, api.url));
  t.equal(playlist.status, 200, 'the VOD playlist is served by the api too');
  t.match(await playlist.text(), /#EXT-X-ENDLIST/, 'and is complete');
});
