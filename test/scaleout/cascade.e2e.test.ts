/**
 * Origin → edge cascade over Redis (decision 0030), everything real: redis-server, one `api`
 * and three `media` processes of `reverie serve` on loopback, an OBS-like H.264 publisher, WHEP
 * viewers (libdatachannel receive-only, and Chromium decoding). The stream's node carries its
 * share of viewers (CASCADE_ORIGIN_VIEWERS=2); later viewers are placed on the two other nodes,
 * which each pull the stream once from the origin and fan it out. Killing an edge sends its
 * viewers' reconnects elsewhere; the publisher never notices. An edge stops pulling once its last
 * viewer left.
 */
import t from 'tap';
import { launchChromium } from '../helpers/chromium.ts';
import { PEER_PAGE, type PeerPage } from '../media/harness.ts';
import { Cluster, type Json } from './cluster.ts';

type W = Window & PeerPage;

t.test('one origin and two edges: viewers past the origin share go to edges, each edge pulls once, an edge crash moves reconnects, the publisher never notices', { timeout: 300_000 }, async (t) => {
  const c = await Cluster.start(t);
  const origin = await c.spawn('origin', 'media');
  await c.until('the origin registered', async () => (await c.store.nodes.list('media')).length === 1);
  const api = await c.spawn('api', 'api', { CASCADE_ORIGIN_VIEWERS: '2' });
  const created = await c.api(api, 'POST', '/v1/streams', { params: { prompt: 'cascade', width: 384, height: 384, skip_diffusion: true } });
  t.equal(created.status, 201, `stream created ${created.status === 201 ? '' : JSON.stringify(created.body)}`);
  const stream = created.body;
  t.equal((await c.store.streams.get(stream['id'] as string))?.nodeId, `127.0.0.1:${origin.port}`, 'placed on the origin (the only node then)');
  // Edges: four viewers each at most, so the five or six edge viewers need both of them, with room
  // to spare for a viewer the api counts twice (placed, then in a beat: counting errs that way).
  const edgeEnv = { WHEP_VIEWERS_PER_NODE: '4', EDGE_LINGER_MS: '1000' };
  const [edgeA, edgeB] = await Promise.all([c.spawn('edgeA', 'media', edgeEnv), c.spawn('edgeB', 'media', edgeEnv)]);
  await c.until('three media nodes registered', async () => (await c.store.nodes.list('media')).length === 3);
  const byUrl = new Map([origin, edgeA, edgeB].map((p) => [p.url, p]));
  const nodeOf = (location: string | null) => byUrl.get(new URL(location ?? 'http://x').origin)?.name ?? '?';

  const pub = await c.publish(`${api.url}/live/${stream['id']}/whip`, stream['stream_key'] as string);
  t.equal(pub.status, 201, 'the publisher attaches through the api');
  const status = async () => (await c.api(api, 'GET', `/v1/streams/${stream['id']}/status`)).body['data'] as Json;
  const live = await c.until('the stream is live', async () => {
    const s = await status();
    return s['state'] === 'ONLINE' && (s['inference_status'] as Json)['output_fps'] > 0 ? s : null;
  });
  const sessionBefore = live['request_id'] as string;
  const whep = stream['output_stream_url'] as string;

  // ── the origin's share, then a Chromium viewer and four more, on edges. The api may count a viewer
  // it just placed twice (once placed, once in the node's beat): it errs toward the edges.
  const viewers: { name: string; node: string; location: string | null; packets(): Promise<number> }[] = [];
  const play = async (i: number) => {
    const v = await c.play(whep, `127.0.3.${i + 1}`);
    t.equal(v.status, 201, `viewer ${i} → 201 ${v.status === 201 ? '' : v.body}`);
    await v.connected(30_000);
    viewers.push({ name: `viewer ${i}`, node: nodeOf(v.location), location: v.location, packets: v.packets });
  };
  await play(0);
  await play(1);
  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  await page.setContent(PEER_PAGE);
  const chromium = await page.evaluate((url) => (window as unknown as W).play({ url }), whep);
  t.equal(chromium.status, 201, 'Chromium viewer → 201');
  const chromiumNode = nodeOf(chromium.location);
  for (let i = 2; i < 6; i++) await play(i);

  const direct = viewers.filter((v) => v.node === 'origin').length;
  const layout = `${viewers.map((v) => v.node).join(', ')}; Chromium on ${chromiumNode}`;
  t.equal(viewers[0]?.node, 'origin', 'the first viewer is on the origin');
  t.ok(direct >= 1 && direct <= 2, `the origin carries no more than its share of 2 (${direct}: ${layout})`);
  t.ok(chromiumNode === 'edgeA' || chromiumNode === 'edgeB', `the Chromium viewer, past the share, is on an edge (${chromiumNode})`);
  const onEdge = (name: string) => viewers.filter((v) => v.node === name).length + (chromiumNode === name ? 1 : 0);
  t.equal(direct + onEdge('edgeA') + onEdge('edgeB'), viewers.length + 1, 'every other viewer is on an edge');
  t.ok(onEdge('edgeA') >= 1 && onEdge('edgeB') >= 1, `both edges carry viewers (A ${onEdge('edgeA')}, B ${onEdge('edgeB')})`);
  t.ok(onEdge('edgeA') <= 4 && onEdge('edgeB') <= 4, 'none past its WHEP_VIEWERS_PER_NODE');

  const frames = await page.evaluate(() => (window as unknown as W).waitFrames(30, 30_000));
  t.ok(frames >= 30, `Chromium on ${chromiumNode} decodes frames relayed from the origin (${frames})`);
  const before = await Promise.all(viewers.map((v) => v.packets()));
  const gained = await c.until('every viewer receives media', async () => {
    const now = await Promise.all(viewers.map((v) => v.packets()));
    const g = now.map((n, i) => n - (before[i] ?? 0));
    return g.every((n) => n >= 100) ? g : null;
  });
  t.ok(Math.min(...gained) >= 100, `all ${viewers.length} libdatachannel viewers receive media (fewest new packets ${Math.min(...gained)})`);

  // ── one pull per edge at the origin; the audience across nodes in status and /metrics
  const audience = await c.until('status shows the audience on all three nodes', async () => {
    const a = (await status())['audience'] as Json | undefined;
    return a && (a['nodes'] as Json[]).length === 3 && a['viewers'] === viewers.length + 1 ? a : null;
  });
  const roleOf = (port: number) => (audience['nodes'] as Json[]).find((n) => n['node'] === `127.0.0.1:${port}`);
  t.match(roleOf(origin.port), { role: 'origin', viewers: direct }, "status: the origin's direct viewers");
  t.match(roleOf(edgeA.port), { role: 'edge', viewers: onEdge('edgeA') }, "status: edge A's viewers");
  t.match(roleOf(edgeB.port), { role: 'edge', viewers: onEdge('edgeB') }, "status: edge B's viewers");
  t.equal((await status())['viewers'], direct + 2, "the origin's own sessions: its direct viewers and one pull per edge");
  const metrics = await (await fetch(`${origin.url}/metrics`)).text();
  t.match(metrics, new RegExp(`reverie_media_audience\\{stream_id="${stream['id']}",role="origin",kind="edge_pull"\\} 2`), "the origin's /metrics: two edges' pulls");

  // ── an edge crashes: its viewers reconnect through the api to a live node; the publisher goes on
  const victim = onEdge('edgeA') >= onEdge('edgeB') ? edgeA : edgeB;
  const survivor = victim === edgeA ? edgeB : edgeA;
  const lost = viewers.filter((v) => v.node === victim.name).length;
  await c.kill(victim, 'SIGKILL');
  await c.until('the registry drops the dead edge', async () => !(await c.store.nodes.list('media')).some((n) => n.id === `127.0.0.1:${victim.port}` && n.expiresAtMs > Date.now()));
  for (let i = 0; i < lost; i++) {
    const v = await c.play(whep, `127.0.4.${i + 1}`);
    t.equal(v.status, 201, `reconnect ${i} → 201`);
    const node = nodeOf(v.location);
    t.not(node, victim.name, `reconnect ${i} placed on a live node (${node})`);
    await v.connected(30_000);
    const p0 = await v.packets();
    await c.until(`reconnect ${i} receives media`, async () => (await v.packets()) - p0 >= 50);
    viewers.push({ name: `reconnect ${i}`, node, location: v.location, packets: v.packets });
  }
  const after = await status();
  t.equal(after['state'], 'ONLINE', 'the stream stayed ONLINE');
  t.equal(after['request_id'], sessionBefore, "the publisher's session is the same one");
  t.ok((after['inference_status'] as Json)['input_fps'] > 0, 'and its frames still arrive');

  // ── every viewer of the surviving edge leaves: it stops pulling after its linger (1 s here)
  const relayed = async () => (await (await fetch(`${survivor.url}/metrics`)).text()).includes(`reverie_media_audience{stream_id="${stream['id']}",role="edge"`);
  t.ok(await relayed(), 'the surviving edge relays the stream while it has viewers');
  if (chromiumNode === survivor.name) {
    await page.evaluate(() => (window as unknown as { view: RTCPeerConnection }).view.close());
    await fetch(chromium.location ?? '', { method: 'DELETE' });
  }
  for (const v of viewers.filter((x) => x.node === survivor.name)) t.equal((await fetch(v.location ?? '', { method: 'DELETE' })).status, 200, `${v.name} leaves (DELETE → 200)`);
  await c.until('the surviving edge stops relaying', async () => !(await relayed()), 15_000);
  t.pass('the edge stopped pulling once its last viewer left');
});
