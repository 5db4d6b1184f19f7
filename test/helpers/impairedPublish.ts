/**
 * OBS-like publishers (libdatachannel) connecting to a real node over an impaired link on
 * loopback, one attempt after another, each on the first try (OBS does not retry):
 *
 *   publisher [::1] ──udpRelay (delay, jitter, loss)──▶ node 127.0.0.1
 *
 * The node runs with WEBRTC_INTERFACES=127.0.0.1, WEBRTC_ANNOUNCED_ADDRESSES=::1 and a two-port
 * WEBRTC_UDP_PORT_RANGE (werift refuses a range of one port), a relay listening on [::1] on each
 * of those ports. The publisher binds to ::1 only, so of the answer's candidates it can reach only
 * the announced ones: every packet crosses a relay, and the node sees the relay's address.
 */
import { createSocket } from 'node:dgram';
import type { Test } from 'tap';
import { stampedH264 } from './h264Source.ts';
import { startLiveServer } from './liveServer.ts';
import { startObsPublishers } from './obsPublisher.ts';
import { startUdpRelay, type Impairment, type UdpRelay } from './udpRelay.ts';
import { until } from './until.ts';

export interface Attempt {
  /** The publisher's peer connection reached `connected`, and the node received its media, within the attempt's limit. */
  connected: boolean;
  /** ms from the WHIP answer to the node's first media (or to the limit). The POST itself is not counted: the first one builds the stream's pipeline. */
  ms: number;
  /** The publisher's last peer-connection state. */
  state: string;
}

export interface ImpairedLink {
  /** Publishes once, waits up to `limitMs` after the answer for the session to carry media, then ends it (DELETE) and waits for the node to let it go. */
  attempt(limitMs: number): Promise<Attempt>;
  /** Changes both directions of the link (applies to packets from now on). */
  set(up: Impairment, down: Impairment): void;
  relays: UdpRelay[];
}

function bindable(port: number, address: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createSocket(address.includes(':') ? 'udp6' : 'udp4');
    s.once('error', () => resolve(false));
    s.bind(port, address, () => s.close(() => resolve(true)));
  });
}

/** Two consecutive UDP ports free on 127.0.0.1 and on ::1 (bounded search). */
async function freeUdpPair(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = 20_000 + 2 * Math.floor(Math.random() * 10_000);
    const free = await Promise.all([port, port + 1].flatMap((p) => [bindable(p, '127.0.0.1'), bindable(p, '::1')]));
    if (free.every(Boolean)) return port;
  }
  throw new Error('no free pair of UDP ports on 127.0.0.1 and ::1');
}

export async function impairedLink(t: Test, up: Impairment, down: Impairment): Promise<ImpairedLink> {
  const port = await freeUdpPair();
  const server = await startLiveServer(t, {
    env: { WEBRTC_UDP_PORT_RANGE: `${port}-${port + 1}`, WEBRTC_INTERFACES: '127.0.0.1', WEBRTC_ANNOUNCED_ADDRESSES: '::1', WEBRTC_ICE_TCP: 'false', ROLES: 'api,media' },
  });
  const relays = await Promise.all(
    [port, port + 1].map((p, i) =>
      startUdpRelay(t, { listen: { address: '::1', port: p }, target: { address: '127.0.0.1', port: p }, up: { seed: 1 + 2 * i, ...up }, down: { seed: 2 + 2 * i, ...down } }),
    ),
  );
  const created = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'link', skip_diffusion: true } });
  if (created.status !== 201) throw new Error(`stream not created: ${created.status} ${JSON.stringify(created.body)}`);
  const stream = created.body as { id: string; whip_url: string; stream_key: string };
  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 60 });
  let attempts = 0;
  const status = async () => (await server.api('GET', `/v1/streams/${stream.id}/status`)).body as { data: { state: string; gateway_status?: { ingest_metrics?: { stats?: { peer_conn_stats?: { ID: string; BytesReceived: number } } } } } };
  /** The bytes the node received on session `id` (0 while another session, or none, is attached). */
  const received = (s: Awaited<ReturnType<typeof status>>, id: string) => {
    const peer = s.data.gateway_status?.ingest_metrics?.stats?.peer_conn_stats;
    return peer && peer.ID !== '' && id.endsWith(peer.ID) ? peer.BytesReceived : 0;
  };

  return {
    relays,
    set(u, d) {
      for (const r of relays) {
        r.set('up', u);
        r.set('down', d);
      }
    },
    async attempt(limitMs) {
      // Each POST from an address of its own: the node limits publish requests per client address.
      const httpFrom = `127.0.0.${10 + (attempts++ % 200)}`;
      const p = await pubs.publish({ url: stream.whip_url, token: stream.stream_key, source, bindAddress: '::1', httpFrom });
      if (p.status !== 201) throw new Error(`WHIP POST answered ${p.status}: ${p.body}`);
      const start = performance.now();
      const connected = await (async () => {
        try {
          await pubs.waitState(p.id, 'connected', limitMs);
          const left = Math.max(1, limitMs - (performance.now() - start));
          await until('the node receives media', status, (s) => received(s, p.location ?? '') > 0, left, 50);
          return true;
        } catch {
          return false;
        }
      })();
      const result = { connected, ms: Math.round(performance.now() - start), state: pubs.state(p.id) };
      await pubs.stop(p.id).catch(() => pubs.vanish(p.id));
      // One session at a time on the two ports: the next attempt starts once this one is gone.
      await until('the node ends the session', status, (s) => s.data.state === 'OFFLINE', 15_000, 100);
      return result;
    },
  };
}
