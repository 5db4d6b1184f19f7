/**
 * Admission in scale-out, everything real: redis-server, one `api` and one `media` process of
 * `reverie serve --roles …`, the cluster's HTTPS hook receiver on loopback. The rule is set through
 * the api replica; a WHEP and a WHIP request sent to the api replica are forwarded to the media
 * node, which asks the hook before it builds anything: the refusal comes back through the replica,
 * the node holds no stream, and the hook sees the client's own address (127.0.0.7, signed by the
 * replica), not the replica's.
 */
import http from 'node:http';
import t from 'tap';
import { realOffer } from '../helpers/wrtcOffer.ts';
import { Cluster, type Json } from './cluster.ts';

/** A POST from a chosen loopback address (fetch cannot pick its source address). */
function postFrom(localAddress: string, url: string, headers: Record<string, string>, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', localAddress, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.setTimeout(30_000, () => req.destroy(new Error('no answer in 30 s')));
    req.on('error', reject);
    req.end(body);
  });
}

t.test('api + media over Redis: the media node asks the hook about requests the api replica forwards, with the client address', { timeout: 240_000 }, async (t) => {
  const c = await Cluster.start(t);
  const media = await c.spawn('media1', 'media');
  const api = await c.spawn('api1', 'api');
  await c.until('the media node registered', async () => (await c.store.nodes.list('media')).length === 1);
  const created = await c.api(api, 'POST', '/v1/streams', { params: { prompt: 'admission', width: 384, height: 384, skip_diffusion: true } });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const stream = created.body as Json;

  c.receiver.reply = (r) => (/"ok":"1"/.test(r.body) ? { status: 200 } : { status: 403 });
  const put = await c.api(api, 'PUT', `/v1/streams/${stream['id'] as string}/admission`, { type: 'hook', url: c.receiver.url('/admit'), actions: ['publish', 'read'] });
  t.equal(put.status, 200, JSON.stringify(put.body));
  const heldStreams = async () => Number(/^reverie_media_streams (\d+)/m.exec(await (await fetch(`${media.url}/metrics`)).text())?.[1] ?? NaN);

  const sdp = { 'content-type': 'application/sdp' };
  const viewer = await postFrom('127.0.0.7', `${api.url}/live/${stream['output_playback_id'] as string}/whep?v=1`, sdp, await realOffer(t, 'recvonly'));
  t.equal(viewer.status, 403, `a refused viewer gets 403 through the api replica (${viewer.body.trim()})`);
  const asked = JSON.parse(c.receiver.requests.at(-1)?.body ?? 'null') as Json | null;
  t.match(asked, { action: 'read', protocol: 'whep', stream_id: stream['id'], client_ip: '127.0.0.7', query: { v: '1' } }, "the hook saw the client's address, not the replica's");
  t.equal(await heldStreams(), 0, 'the media node holds no stream for the refused viewer');

  const publisher = await postFrom('127.0.0.7', `${api.url}/live/${stream['id'] as string}/whip`, { ...sdp, authorization: `Bearer ${stream['stream_key'] as string}` }, await realOffer(t, 'sendonly'));
  t.equal(publisher.status, 403, 'a refused publisher gets 403 through the api replica');
  t.equal(await heldStreams(), 0, 'and takes no slot on the node');

  const admitted = await postFrom('127.0.0.7', `${api.url}/live/${stream['output_playback_id'] as string}/whep?ok=1`, sdp, await realOffer(t, 'recvonly'));
  t.equal(admitted.status, 201, 'a viewer the hook admits gets its answer');
  t.match(admitted.body, /^v=0/, 'an SDP answer');
});
