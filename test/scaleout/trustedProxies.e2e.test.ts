/**
 * Scale-out behind the TLS proxy: nginx (adding X-Forwarded-For) → an api replica with
 * TRUSTED_PROXIES=127.0.0.1 → the media node it forwards WHIP to. The replica signs the address
 * of the client behind nginx (`x-reverie-forwarded`), so the node's per-address limit counts
 * clients, not the proxy. Real `reverie serve` processes over a real redis-server.
 */
import wrtc from '@roamhq/wrtc';
import t from 'tap';
import { send } from '../helpers/net.ts';
import { haveNginx, startNginxProxy } from '../helpers/nginxProxy.ts';
import { Cluster } from './cluster.ts';

/** The media node's default WHIP POSTs per client address a minute (media/settings.ts). */
const WHIP_PER_ADDRESS = 30;

async function realOffer(t: { teardown(fn: () => unknown): void }): Promise<string> {
  const pc = new wrtc.RTCPeerConnection();
  t.teardown(() => pc.close());
  pc.addTransceiver('audio', { direction: 'sendonly' });
  pc.addTransceiver('video', { direction: 'sendonly' });
  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  return offer.sdp ?? '';
}

t.test('nginx → api replica → media node: 30 keyless WHIP POSTs from one client do not refuse another client\'s publish', { timeout: 120_000, skip: !haveNginx && 'nginx not installed' }, async (t) => {
  const c = await Cluster.start(t);
  const media = await c.spawn('media1', 'media');
  const api = await c.spawn('api1', 'api', { TRUSTED_PROXIES: '127.0.0.1' });
  const proxy = await startNginxProxy(t, api.url);
  const created = await c.api(api, 'POST', '/v1/streams', { params: { prompt: 'proxy', width: 384, height: 384, skip_diffusion: true } });
  if (!t.equal(created.status, 201, created.status === 201 ? 'stream created' : JSON.stringify(created.body))) return;
  const whip = `/live/${created.body['id'] as string}/whip`;
  const junk = () => send(proxy.url, { method: 'POST', path: whip, from: '127.0.0.2', headers: { 'content-type': 'application/sdp' }, body: 'v=0\r\n' });

  const statuses = [];
  for (let i = 0; i < WHIP_PER_ADDRESS; i++) statuses.push((await junk()).status);
  t.same([...new Set(statuses)], [401], `${WHIP_PER_ADDRESS} keyless POSTs, forwarded to the node: each 401`);

  const pub = await send(proxy.url, {
    method: 'POST',
    path: whip,
    from: '127.0.0.3',
    headers: { 'content-type': 'application/sdp', authorization: `Bearer ${created.body['stream_key'] as string}` },
    body: await realOffer(t),
  });
  t.equal(pub.status, 201, `another client's publish with the stream key → 201${pub.status === 201 ? '' : ` (got: ${pub.body.trim()})`}`);
  t.match(String(pub.headers['location']), media.url, 'answered by the media node');

  const over = await junk();
  t.equal(over.status, 429, `the junk client's POST ${WHIP_PER_ADDRESS + 1} → 429 from the node`);
  t.match(over.body, /publish requests from this address/);
});
