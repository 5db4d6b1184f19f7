/**
 * End to end, everything real: the app and the stream roles of the embedded default (MediaNode +
 * InProcessMediaNodeClient + StreamService + StreamLifecycle) on an embedded store, the webhook
 * delivery engine posting to an HTTPS receiver on loopback, and headless Chromium publishing its
 * fake camera over WHIP. Only the supervisor's clock is moved by hand, so the 40 s silence window
 * passes at once.
 */
import pino from 'pino';
import t from 'tap';
import { createWebhooks, SIGNATURE_HEADER, verifySignature, type WebhookEvent } from '../../webhooks/index.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { startRolesServer, type Json } from '../helpers/rolesServer.ts';
import type { PeerPage } from '../media/harness.ts';
import { makeTls, TestReceiver } from '../webhooks/helpers.ts';

type W = Window & PeerPage;

t.test('create → WHIP publish → stream.started → hot and reload PATCH → silence → stream.ended(timeout) → republish → DELETE → stream.ended(deleted)', { timeout: 180_000 }, async (t) => {
  const tls = makeTls();
  const receiver = await TestReceiver.start(tls);
  t.teardown(async () => {
    await receiver.close();
    tls.cleanup();
  });
  let offset = 0;
  const { base, api, roles, store } = await startRolesServer(t, {
    plan: 'pro',
    overrides: { lifecycleClock: { now: () => Date.now() + offset, setInterval: (fn, ms) => setInterval(fn, ms), clearInterval: (h) => clearInterval(h as NodeJS.Timeout) } },
    webhooks: (store) => {
      const webhooks = createWebhooks({ store, logger: pino({ level: process.env['LOG_LEVEL'] ?? 'silent' }), allowLoopback: true, ca: tls.ca });
      void webhooks.engine.start();
      return webhooks;
    },
    peerPage: true,
  });
  const delivered = async (n: number): Promise<WebhookEvent> => {
    await receiver.waitForCount(n);
    const req = receiver.requests[n - 1]!;
    t.ok(verifySignature(req.body, String(req.headers[SIGNATURE_HEADER.toLowerCase()]), secret), `delivery ${n} is signed with the endpoint secret`);
    return JSON.parse(req.body) as WebhookEvent;
  };

  const hook = await api('POST', '/v1/webhooks', { url: receiver.url('/hook'), events: ['stream.started', 'stream.ended'] });
  t.equal(hook.status, 201, 'loopback HTTPS receiver registered (allowLoopback)');
  const secret = hook.body.secret as string;

  const created = await api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'a cat', width: 384, height: 384 } });
  t.equal(created.status, 201);
  const s = created.body;
  t.equal(s.whip_url, `${base}/live/${s.id}/whip`);

  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  await page.goto(`${base}/peer.html`);
  const publish = () => page.evaluate((o) => (window as unknown as W).publish(o), { url: s.whip_url as string, token: s.stream_key as string, codec: 'VP8' as const, width: 320, height: 240 });

  // ── publish → stream.started
  const first = await publish();
  t.equal(first.status, 201, `WHIP 201 (${first.status === 201 ? 'ok' : first.body})`);
  const started = await delivered(1);
  t.match(started, { type: 'stream.started', data: { stream_id: s.id, pipeline_id: 'streamdiffusion', created_at: s.created_at, gateway_host: new URL(base).host } });
  t.equal((await store.streams.get(s.id))?.state, 'started');

  const statusOf = async () => (await api('GET', `/v1/streams/${s.id}/status`)).body.data as Json;
  const waitStatus = async (what: string, ok: (d: Json) => boolean): Promise<Json> => {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const d = await statusOf();
      if (ok(d)) return d;
      if (Date.now() > deadline) throw new Error(`status never showed ${what}: ${JSON.stringify(d)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  let st = await waitStatus('output fps and ingest packets', (d) => d.inference_status.output_fps > 0 && d.gateway_status.ingest_metrics.stats.track_stats[0]?.packets_received > 0);
  t.match(st.state, /^(ONLINE|DEGRADED_INPUT|DEGRADED_INFERENCE)$/, `a live runner state (${st.state})`);
  t.type(st.last_state_update_time, 'number');
  t.type(st.inference_status.start_time, 'number');
  t.ok(st.inference_status.input_fps > 0, `input fps ${st.inference_status.input_fps}`);
  t.match(st.request_id, /^[0-9a-f]{32}$/, 'request_id is the WHIP session');
  const stats = st.gateway_status.ingest_metrics.stats;
  t.equal(stats.peer_conn_stats.ID, st.request_id);
  t.ok(stats.peer_conn_stats.BytesReceived > 1000, `BytesReceived ${stats.peer_conn_stats.BytesReceived}`);
  // The node's feedback to the publisher: at least the PLI it sends when the video starts.
  t.ok(stats.peer_conn_stats.BytesSent > 0, `BytesSent ${stats.peer_conn_stats.BytesSent}`);
  t.match(stats.track_stats[0], { type: 'video', jitter: Number, packets_lost: Number, packet_loss_pct: Number, rtt: Number, warnings: Array });
  t.match(stats.conn_quality, /^(good|fair|poor)$/);

  // ── hot PATCH: seen in status, no restart
  const hot = await api('PATCH', `/v1/streams/${s.id}`, { params: { prompt: 'a dog', guidance_scale: 1.5 } });
  t.equal(hot.headers.get('x-params-update'), 'hot');
  t.equal(hot.headers.get('x-params-update-by'), 'node', 'the engine running the stream planned it');
  st = await statusOf();
  t.equal(st.inference_status.last_params.prompt, 'a dog', 'the node has the new prompt');
  t.equal(st.inference_status.last_params.guidance_scale, 1.5);
  t.equal(st.inference_status.restart_count, 0, 'no restart for a hot param');

  // ── reload PATCH: restart_count rises, frames keep flowing
  const reload = await api('PATCH', `/v1/streams/${s.id}`, { params: { do_add_noise: false } });
  t.equal(reload.headers.get('x-params-update'), 'reload');
  t.equal(reload.headers.get('x-params-update-by'), 'node', 'the engine running the stream planned it');
  // The new pipeline builds in the background while the old one serves; the count rises when it swaps in.
  st = await waitStatus('the reload finishing', (d) => d.inference_status.restart_count >= 1);
  t.equal(st.inference_status.restart_count, 1, 'restart_count rose');
  t.equal(st.inference_status.last_params.do_add_noise, false, 'the node runs the new params');
  t.ok(st.inference_status.last_restart_logs.length > 0, 'the reload left logs');
  t.equal(st.state, 'DEGRADED_INFERENCE', 'a restart in the last 60 s degrades inference (ai-runner rule)');
  const framesBefore = roles.node!.status(s.id)!.framesOut;
  await waitStatus('frames after the reload', () => roles.node!.status(s.id)!.framesOut > framesBefore + 10);

  // ── stop publishing → silence → stream.ended(timeout), ended_at backdated
  await fetch(first.location!, { method: 'DELETE', headers: { authorization: `Bearer ${s.stream_key}` } });
  await page.evaluate(() => (window as unknown as { pub: RTCPeerConnection }).pub.close());
  await roles.lifecycle!.idle();
  const rec = await store.streams.get(s.id);
  const lastLive = Date.parse(rec!.lastLiveAt!);
  t.ok(Date.now() - lastLive < 2000, 'lastLiveAt is the last output frame');
  await roles.lifecycle!.sweep();
  t.equal((await store.streams.get(s.id))?.state, 'started', 'still started inside the window');
  offset = roles.lifecycle!.timeoutMs + 1000;
  await roles.lifecycle!.sweep();
  const ended = await delivered(2);
  t.match(ended, { type: 'stream.ended', data: { stream_id: s.id, reason: 'timeout', started_at: started.data.started_at, ended_at: rec!.lastLiveAt } });
  if (ended.type === 'stream.ended') {
    t.equal(ended.data.duration_seconds, Math.round((lastLive - Date.parse(started.data.started_at)) / 1000), 'duration is whole seconds from start to last signal');
    t.ok(Number.isInteger(ended.data.duration_seconds));
    t.ok(Date.parse(ended.created_at) - Date.parse(ended.data.ended_at) >= roles.lifecycle!.timeoutMs, 'ended_at is backdated past the detection delay');
  }
  t.equal((await statusOf()).state, 'OFFLINE', 'OFFLINE after teardown');

  // ── publish again → a fresh stream.started
  const second = await publish();
  t.equal(second.status, 201);
  const restarted = await delivered(3);
  t.equal(restarted.type, 'stream.started');
  t.not(restarted.id, started.id, 'a fresh event');
  t.ok(Date.parse(restarted.data.started_at) > lastLive, 'a new session start');

  // ── DELETE → stream.ended(deleted)
  const del = await api('DELETE', `/v1/streams/${s.id}`);
  t.same(del.body, { success: true, data: {} });
  const gone = await delivered(4);
  t.match(gone, { type: 'stream.ended', data: { reason: 'deleted', started_at: restarted.data.started_at } });
  t.equal(roles.node!.status(s.id), null, 'the node dropped the stream');
  t.match(await statusOf(), { state: 'OFFLINE', end_reason: 'deleted' }, 'status after DELETE reads OFFLINE, reason deleted');
  t.equal((await api('GET', `/v1/streams/${s.id}`)).status, 404, 'the stream itself is gone');
  t.equal(receiver.requests.length, 4, 'exactly four deliveries');
});
