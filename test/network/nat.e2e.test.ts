/**
 * The live path across real network boundaries, each built by the test in its own network
 * namespaces (iproute2 veth pairs, nftables NAT and filters) and removed afterwards:
 *
 * 1. publisher behind a masquerading NAT (a home router) → node;
 * 2. node behind a 1:1 NAT (a cloud VM, Docker) announcing its outside address → publisher outside;
 * 3. UDP between publisher and node blocked: media goes through a real coturn with per-session
 *    credentials made from the shared secret, and an expired credential is refused.
 *
 * The node is a real `reverie serve` process configured only through its environment, the
 * publisher the OBS-like libdatachannel client (H.264, no candidates, no trickle), the viewer
 * Chromium playing WHEP. Slow suite (≈ 1 min): it builds three labs and starts three servers.
 */
import t, { type Test } from 'tap';
import { turnCredential } from '../../media/index.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { canUseNetns, createLab, type Lab } from '../helpers/netns.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { startServerProcess, type ServerProcess } from '../helpers/serverProcess.ts';
import { turnAllocate } from '../helpers/turnClient.ts';
import { PEER_PAGE, type PeerPage } from '../media/harness.ts';
import { until } from '../helpers/until.ts';

type W = Window & PeerPage;

if (!(await canUseNetns())) {
  t.fail('network namespaces need root with iproute2 and nftables (CI runs as root; `bash .ci/run` installs them)');
  process.exit(1);
}

/** A processors-only stream, published by an OBS-like client in `ns`, then played by Chromium here. */
async function publishAndPlay(t: Test, lab: Lab, server: ServerProcess, pubNs: string, publish: { iceServersFromLink?: boolean } = {}) {
  const created = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'lab', skip_diffusion: true } });
  t.equal(created.status, 201, `stream created (${JSON.stringify(created.body).slice(0, 200)})`);
  const stream = created.body as { id: string; whip_url: string; stream_key: string; output_stream_url: string };
  const pubs = startObsPublishers(t, { netns: lab.ns(pubNs) });
  const p = await pubs.publish({ url: stream.whip_url, token: stream.stream_key, source: await stampedH264({ size: 512, frames: 150 }), ...publish });
  t.equal(p.status, 201, `WHIP → 201 (${p.body})`);
  await pubs.waitState(p.id, 'connected', 20_000);
  const status = await until(
    'live input',
    async () => (await server.api('GET', `/v1/streams/${stream.id}/status`)).body as { data: { inference_status: { input_fps: number; output_fps: number } } },
    (s) => s.data.inference_status.input_fps >= 20 && s.data.inference_status.output_fps >= 20,
    20_000,
  );
  t.ok(status.data.inference_status.input_fps >= 20, `status shows live input_fps (${status.data.inference_status.input_fps.toFixed(1)})`);
  const ctx = await launchChromium(t, { fakeMedia: false });
  const page = await ctx.newPage();
  await page.route('http://viewer.test/peer.html', (route) => route.fulfill({ contentType: 'text/html', body: PEER_PAGE }));
  await page.goto('http://viewer.test/peer.html');
  const played = await page.evaluate((url) => (window as unknown as W).play({ url }), stream.output_stream_url);
  t.equal(played.status, 201, 'WHEP → 201');
  const frames = await page.evaluate(() => (window as unknown as W).waitFrames(20, 20_000));
  t.ok(frames >= 20, `the Chromium viewer decoded ${frames} frames`);
  return { pubs, p, stream };
}

t.test('a publisher behind a masquerading NAT reaches the node; media flows and status shows live input', { timeout: 180_000 }, async (t) => {
  const lab = await createLab(t, 1, ['srv', 'rt', 'pub']);
  const [here, rtUp, rtSrv, srv] = [lab.ip(0, 1), lab.ip(0, 2), lab.ip(1, 1), lab.ip(1, 2)];
  await lab.link({ ns: null, addr: here }, { ns: 'rt', addr: rtUp });
  await lab.link({ ns: 'rt', addr: rtSrv }, { ns: 'srv', addr: srv });
  await lab.link({ ns: 'rt', addr: '10.201.0.1/24' }, { ns: 'pub', addr: '10.201.0.2/24' });
  await lab.run('srv', ['ip', 'route', 'add', 'default', 'via', lab.ip(1, 1, false)]);
  await lab.run('pub', ['ip', 'route', 'add', 'default', 'via', '10.201.0.1']);
  await lab.routeFromHere(lab.ip(0, 2, false));
  await lab.run('rt', ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  // A home router: the LAN leaves with the router's address (and ports), and nothing gets in unasked.
  await lab.nft(
    'rt',
    `table ip nat {
       chain post {
         type nat hook postrouting priority srcnat;
         ip saddr 10.201.0.0/24 masquerade
       }
     }
     table ip filter {
       chain forwarding {
         type filter hook forward priority filter; policy accept;
         ip daddr 10.201.0.0/24 ct state new drop
       }
     }`,
  );
  const node = lab.ip(1, 2, false);
  const server = await startServerProcess(t, { lab, ns: 'srv', env: { HOST: '0.0.0.0', PORT: '8080', PUBLIC_URL: `http://${node}:8080`, WEBRTC_INTERFACES: node } });
  const { pubs, p } = await publishAndPlay(t, lab, server, 'pub');
  const pair = (await pubs.stats(p.id)).selected;
  // The node saw the publisher at the router's address (the peer-reflexive candidate it reported back).
  t.match(pair?.local, { type: 'prflx', address: lab.ip(1, 1, false) }, `the publisher reaches the node through the NAT (${JSON.stringify(pair?.local)})`);
  t.equal(pair?.remote.address, node, 'at the node\'s own address');
});

t.test('a node behind a 1:1 NAT announces its outside address; a publisher outside reaches it', { timeout: 180_000 }, async (t) => {
  const lab = await createLab(t, 2, ['srv', 'rt', 'pub']);
  const outside = lab.ip(2, 100, false); // the public address: on no interface of the node
  await lab.link({ ns: null, addr: lab.ip(0, 1) }, { ns: 'rt', addr: lab.ip(0, 2) });
  await lab.link({ ns: 'rt', addr: lab.ip(1, 1) }, { ns: 'pub', addr: lab.ip(1, 2) });
  await lab.link({ ns: 'rt', addr: '10.202.0.1/24' }, { ns: 'srv', addr: '10.202.0.2/24' });
  await lab.run('srv', ['ip', 'route', 'add', 'default', 'via', '10.202.0.1']);
  await lab.run('pub', ['ip', 'route', 'add', 'default', 'via', lab.ip(1, 1, false)]);
  await lab.routeFromHere(lab.ip(0, 2, false));
  await lab.run('rt', ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  // 1:1 NAT: the outside address maps to the node both ways; the private network is unreachable otherwise.
  await lab.nft(
    'rt',
    `table ip nat {
       chain pre {
         type nat hook prerouting priority dstnat;
         ip daddr ${outside} dnat to 10.202.0.2
       }
       chain post {
         type nat hook postrouting priority srcnat;
         ip saddr 10.202.0.2 snat to ${outside}
       }
     }
     table ip filter {
       chain forwarding {
         type filter hook forward priority filter; policy accept;
         ct status dnat accept
         ip daddr 10.202.0.0/24 ct state new drop
       }
     }`,
  );
  const server = await startServerProcess(t, {
    lab,
    ns: 'srv',
    env: { HOST: '0.0.0.0', PORT: '8080', PUBLIC_URL: `http://${outside}:8080`, WEBRTC_INTERFACES: '10.202.0.2', WEBRTC_ANNOUNCED_ADDRESSES: outside, WEBRTC_UDP_PORT_RANGE: '41000-41099' },
  });
  const { pubs, p } = await publishAndPlay(t, lab, server, 'pub');
  const pair = (await pubs.stats(p.id)).selected;
  t.equal(pair?.remote.address, outside, 'the publisher reaches the node at its announced address');
  t.ok((pair?.remote.port ?? 0) >= 41000 && (pair?.remote.port ?? 0) <= 41099, `on a port of WEBRTC_UDP_PORT_RANGE (${pair?.remote.port})`);
});

t.test('UDP between publisher and node blocked: media flows through coturn with per-session credentials; an expired credential is refused', { timeout: 180_000 }, async (t) => {
  const lab = await createLab(t, 3, ['srv', 'rt', 'pub', 'turn']);
  await lab.link({ ns: null, addr: lab.ip(0, 1) }, { ns: 'rt', addr: lab.ip(0, 2) });
  await lab.link({ ns: 'rt', addr: lab.ip(1, 1) }, { ns: 'srv', addr: lab.ip(1, 2) });
  await lab.link({ ns: 'rt', addr: lab.ip(2, 1) }, { ns: 'pub', addr: lab.ip(2, 2) });
  await lab.link({ ns: 'rt', addr: lab.ip(3, 1) }, { ns: 'turn', addr: lab.ip(3, 2) });
  for (const [ns, gw] of [['srv', 1], ['pub', 2], ['turn', 3]] as const) await lab.run(ns, ['ip', 'route', 'add', 'default', 'via', lab.ip(gw, 1, false)]);
  await lab.routeFromHere(lab.ip(0, 2, false));
  await lab.run('rt', ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  const [srvNet, pubNet] = [`198.18.${3 * 4 + 1}.0/24`, `198.18.${3 * 4 + 2}.0/24`];
  // A firewall that lets the publisher's HTTP through but none of its UDP to the node, either way.
  await lab.nft(
    'rt',
    `table ip filter {
       chain forwarding {
         type filter hook forward priority filter; policy accept;
         ip saddr ${pubNet} ip daddr ${srvNet} meta l4proto udp drop
         ip saddr ${srvNet} ip daddr ${pubNet} meta l4proto udp drop
       }
     }`,
  );
  const secret = 'lab-turn-shared-secret-0123456789';
  const turnIp = lab.ip(3, 2, false);
  const coturn = lab.spawn('turn', 'turnserver', [
    ...['-c', '/dev/null', `--listening-ip=${turnIp}`, `--relay-ip=${turnIp}`, '--listening-port=3478', '--min-port=49152', '--max-port=49352'],
    ...['--use-auth-secret', `--static-auth-secret=${secret}`, '--realm=reverie.test', '--no-tls', '--no-dtls', '--no-cli', '--log-file=stdout', '--simple-log'],
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  let coturnLog = '';
  coturn.stdout?.on('data', (d: Buffer) => (coturnLog += d.toString()));
  await until('coturn listening', async () => coturnLog, (l) => /Relay address to use|listener opened/i.test(l), 10_000);
  const node = lab.ip(1, 2, false);
  const server = await startServerProcess(t, {
    lab,
    ns: 'srv',
    env: { HOST: '0.0.0.0', PORT: '8080', PUBLIC_URL: `http://${node}:8080`, WEBRTC_INTERFACES: node, TURN_URLS: `turn:${turnIp}:3478?transport=udp`, TURN_SECRET: secret },
  });
  const { pubs, p } = await publishAndPlay(t, lab, server, 'pub', { iceServersFromLink: true });
  const pair = (await pubs.stats(p.id)).selected;
  t.match(pair?.local.type, /relay/i, `the publisher's media is relayed by coturn (${JSON.stringify(pair)})`);
  t.equal(pair?.remote.address, node);

  // The node's credential format against coturn itself: fresh is accepted, expired refused.
  const fresh = turnCredential(secret, 600);
  const ok = await turnAllocate({ host: turnIp, port: 3478 }, fresh.username, fresh.credential);
  t.ok(ok.ok, `a fresh credential allocates a relay (${JSON.stringify(ok)})`);
  const expired = turnCredential(secret, 60, Date.now() - 3_600_000);
  const refused = await turnAllocate({ host: turnIp, port: 3478 }, expired.username, expired.credential);
  t.notOk(refused.ok, 'an expired credential is refused');
  t.equal(refused.code, 401, `with 401 Unauthorized (${refused.reason})`);
  const forged = await turnAllocate({ host: turnIp, port: 3478 }, fresh.username, 'not-the-hmac');
  t.equal(forged.code, 401, 'and so is a credential not made from the secret');

  // What makes a viewer's credential of minutes safe for hours of viewing: coturn checks the expiry
  // when it authenticates the Allocate, and refreshes the allocation past it with the key it cached.
  const brief = turnCredential(secret, 3);
  const kept = await turnAllocate({ host: turnIp, port: 3478 }, brief.username, brief.credential, 5_000, () =>
    until('the credential expired', () => Date.now(), (now) => now > brief.expiresAt + 1000, 10_000),
  );
  t.ok(kept.ok, 'a short credential allocates while valid');
  t.ok(kept.refreshed?.ok, `and the allocation is refreshed after it expired (${JSON.stringify(kept.refreshed)})`);
  const late = await turnAllocate({ host: turnIp, port: 3478 }, brief.username, brief.credential);
  t.equal(late.code, 401, 'but a new allocation with it is refused');
});

t.test('a browser publisher whose UDP is blocked publishes over ICE-TCP', { timeout: 180_000 }, async (t) => {
  const lab = await createLab(t, 4, ['srv', 'rt']);
  await lab.link({ ns: null, addr: lab.ip(0, 1) }, { ns: 'rt', addr: lab.ip(0, 2) });
  await lab.link({ ns: 'rt', addr: lab.ip(1, 1) }, { ns: 'srv', addr: lab.ip(1, 2) });
  await lab.run('srv', ['ip', 'route', 'add', 'default', 'via', lab.ip(1, 1, false)]);
  await lab.routeFromHere(lab.ip(0, 2, false));
  await lab.run('rt', ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  const [browserNet, srvNet] = [`198.18.${4 * 4}.0/24`, `198.18.${4 * 4 + 1}.0/24`];
  await lab.nft(
    'rt',
    `table ip filter {
       chain forwarding {
         type filter hook forward priority filter; policy accept;
         ip saddr ${browserNet} ip daddr ${srvNet} meta l4proto udp drop
         ip saddr ${srvNet} ip daddr ${browserNet} meta l4proto udp drop
       }
     }`,
  );
  const node = lab.ip(1, 2, false);
  const server = await startServerProcess(t, { lab, ns: 'srv', env: { HOST: '0.0.0.0', PORT: '8080', PUBLIC_URL: `http://${node}:8080`, WEBRTC_INTERFACES: node, WEBRTC_UDP_PORT_RANGE: '42000-42099' } });
  const created = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'tcp', skip_diffusion: true } });
  const stream = created.body as { id: string; whip_url: string; stream_key: string };
  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  await page.route('http://localhost:9/peer.html', (route) => route.fulfill({ contentType: 'text/html', body: PEER_PAGE }));
  await page.goto('http://localhost:9/peer.html'); // localhost: a secure context, so getUserMedia works
  const published = await page.evaluate((o) => (window as unknown as W).publish(o), { url: stream.whip_url, token: stream.stream_key, codec: 'H264' as const, width: 320, height: 240 });
  t.equal(published.status, 201, `WHIP → 201 (${published.status === 201 ? '' : published.body})`);
  const live = await until(
    'live input over TCP',
    async () => (await server.api('GET', `/v1/streams/${stream.id}/status`)).body as { data: { inference_status: { input_fps: number } } },
    (s) => s.data.inference_status.input_fps >= 5,
    30_000,
  );
  t.ok(live.data.inference_status.input_fps >= 5, `the node receives the publisher's frames (${live.data.inference_status.input_fps} fps)`);
  const transport = await page.evaluate(async () => {
    const stats = await (window as unknown as { pub: RTCPeerConnection }).pub.getStats();
    let pairId = '';
    stats.forEach((s) => {
      if (s.type === 'transport' && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId;
    });
    const pair = stats.get(pairId);
    const remote = pair ? stats.get(pair.remoteCandidateId) : undefined;
    return { protocol: remote?.protocol, port: remote?.port, type: remote?.candidateType };
  });
  t.equal(transport.protocol, 'tcp', `the publisher's media goes over TCP (${JSON.stringify(transport)})`);
  t.ok((transport.port ?? 0) >= 42000 && (transport.port ?? 0) <= 42099, 'to a port of WEBRTC_UDP_PORT_RANGE (ICE-TCP uses the same numbers)');
});
