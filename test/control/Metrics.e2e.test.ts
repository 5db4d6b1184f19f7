/**
 * /metrics by the book: the whole exposition of a real server passes a promtool-equivalent lint
 * (test/helpers/promLint.ts; and `promtool check metrics` itself where the prometheus package is
 * installed), with song-render, queue and media-stage series that carry real numbers: a song
 * rendered by the worker role, a stream published by headless Chromium.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t, { type Test } from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { loadConfig } from '../../control/config.ts';
import { registerMediaMetrics } from '../../control/MediaMetrics.ts';
import { Metrics } from '../../control/Metrics.ts';
import { registerQueueMetrics } from '../../control/Roles.ts';
import { createStore } from '../../store/index.ts';
import { startRedis } from '../helpers/redis.ts';
import { startServer } from '../../control/Server.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { freePort } from '../helpers/net.ts';
import { lintExposition, type Family } from '../helpers/promLint.ts';
import { STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from '../media/harness.ts';

const promtool = spawnSync('promtool', ['--version']).status === 0;

function checkWithPromtool(t: Test, text: string): void {
  if (!promtool) return;
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  t.equal(r.status, 0, `promtool check metrics: ${r.stdout}${r.stderr}`);
}

const value = (f: Family | undefined, name: string, labels: Record<string, string>) =>
  f?.samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;

t.test('the linter flags what promtool flags', async (t) => {
  const bad = [
    '# HELP reverie_media_stage_latency_ms Per-stage latency, ms.',
    '# TYPE reverie_media_stage_latency_ms gauge',
    'reverie_media_stage_latency_ms{stage="decode",quantile="0.5"} 3',
    '# HELP reverie_media_ingest_packets_lost RTP packets lost.',
    '# TYPE reverie_media_ingest_packets_lost counter',
    'reverie_media_ingest_packets_lost 2',
    '# TYPE x_seconds histogram',
    'x_seconds_bucket{le="1"} 5',
    'x_seconds_bucket{le="+Inf"} 4',
    'x_seconds_count 3',
  ].join('\n');
  const { problems } = lintExposition(bad);
  for (const want of [/stage_latency_ms: use base units/, /quantile label outside a summary/, /packets_lost: counter names should end in _total/, /x_seconds: no HELP/, /bucket counts decrease/, /_count 3 differs/, /no _sum/]) {
    t.ok(problems.some((p) => want.test(p)), `flags ${want}`);
  }
});

t.test('a real server’s /metrics is lint-clean and counts song renders and queue depth', { timeout: 120_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-metrics-'));
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: await freePort(), LOG_LEVEL: 'silent', ROLES: 'api,worker', RENDER_WORKERS: 1 });
  const server = await startServer(config, { logger: pino({ level: 'silent' }) });
  t.teardown(async () => {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const { key } = await createAccountWithKey(server.store, 'free');
  const auth = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const created = await fetch(`${server.url}/music/v1/songs`, { method: 'POST', headers: auth, body: JSON.stringify({ prompt: 'calm piano', duration: 10, variations: 1 }) });
  t.equal(created.status, 202, 'song accepted');
  const { id } = (await created.json()) as { id: string };
  let status = '';
  // The song's own status is the signal the render finished (polling the API, as a client does).
  for (let i = 0; i < 1200 && status !== 'done'; i++) {
    status = ((await (await fetch(`${server.url}/music/v1/songs/${id}`, { headers: auth })).json()) as { status: string }).status;
    if (status !== 'done') await new Promise((r) => setTimeout(r, 100)); // poll interval, not a sync
  }
  t.equal(status, 'done');

  const text = await (await fetch(`${server.url}/metrics`)).text();
  const { problems, families } = lintExposition(text);
  t.same(problems, [], 'no lint problems');
  checkWithPromtool(t, text);
  t.equal(value(families.get('reverie_song_renders_total'), 'reverie_song_renders_total', { outcome: 'done' }), 1, 'one render done');
  const renderCount = value(families.get('reverie_song_render_duration_seconds'), 'reverie_song_render_duration_seconds_count', { outcome: 'done' });
  t.equal(renderCount, 1, 'its duration is in the histogram');
  for (const queue of ['songs.render', 'webhooks.deliver', 'events']) {
    t.equal(value(families.get('reverie_queue_jobs'), 'reverie_queue_jobs', { queue, state: 'ready' }), 0, `${queue}: nothing waiting`);
  }
  t.ok(families.get('reverie_http_request_duration_seconds'), 'request histogram present');
});

type W = Window & PeerPage;

t.test('media metrics of a live stream: stage histograms in seconds, frame and byte counters', { timeout: 120_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256 } });
  const metrics = new Metrics({ defaultMetrics: false });
  registerMediaMetrics(metrics, srv.node);
  const ctx = await launchChromium(t);
  const pub = await ctx.newPage();
  await pub.goto(`${srv.baseUrl}/peer.html`);
  const started = new Promise<void>((resolve) => srv.node.once('started', () => resolve()));
  const published = await pub.evaluate((o) => (window as unknown as W).publish(o), { url: srv.whipUrl, token: STREAM_KEY, codec: 'H264' as const, width: 320, height: 240 });
  t.equal(published.status, 201);
  await started;
  // Wait on the stream's own count of encoded frames (no sleeps).
  for (let i = 0; i < 2000 && (srv.node.status(STREAM_ID)?.framesOut ?? 0) < 20; i++) await new Promise((r) => setTimeout(r, 10));

  const text = await metrics.registry.metrics();
  const { problems, families } = lintExposition(text);
  t.same(problems, [], 'no lint problems');
  checkWithPromtool(t, text);
  t.notOk(/stage_latency_ms|quantile=/.test(text), 'no millisecond gauges with quantile labels left');
  const stage = families.get('reverie_media_stage_duration_seconds');
  t.equal(stage?.type, 'histogram');
  for (const s of ['decode', 'encode', 'node']) {
    const count = value(stage, 'reverie_media_stage_duration_seconds_count', { stream_id: STREAM_ID, stage: s }) ?? 0;
    const sum = value(stage, 'reverie_media_stage_duration_seconds_sum', { stream_id: STREAM_ID, stage: s }) ?? 0;
    t.ok(count >= 20, `${s}: ${count} frames timed`);
    t.ok(sum > 0 && sum / count < 1, `${s}: mean ${((sum / count) * 1000).toFixed(2)} ms, in seconds`);
  }
  t.ok((value(families.get('reverie_media_output_frames_total'), 'reverie_media_output_frames_total', { stream_id: STREAM_ID }) ?? 0) >= 20, 'output frames counted');
  // The LL-HLS packager's repairs of its timeline, per stream (a live stream on a quiet node has a counter, typed, at whatever value).
  for (const name of ['reverie_media_hls_cuts_total', 'reverie_media_hls_cut_seconds_total', 'reverie_media_hls_audio_frames_silent_total', 'reverie_media_hls_audio_frames_dropped_total', 'reverie_media_hls_audio_resyncs_total']) {
    t.equal(families.get(name)?.type, 'counter', `${name} is a counter`);
    t.ok((value(families.get(name), name, { stream_id: STREAM_ID }) ?? -1) >= 0, `${name} has the stream's value`);
  }
  t.ok((value(families.get('reverie_media_ingest_received_bytes_total'), 'reverie_media_ingest_received_bytes_total', { stream_id: STREAM_ID }) ?? 0) > 10_000, 'ingest bytes counted');
});

t.test('queue depth comes from the shared store, and a Redis outage leaves it out instead of stalling the scrape', { timeout: 60_000 }, async (t) => {
  const redis = await startRedis(t);
  const store = await createStore({ dataDir: mkdtempSync(join(tmpdir(), 'rv-qm-')), redisUrl: redis.url, redisPrefix: `rv-qm-${process.pid}:` });
  t.teardown(() => store.close());
  await store.queue.enqueue({ queue: 'songs.render', id: 'job-1', payload: { songId: 'sng_x' }, runAtMs: Date.now() });
  const metrics = new Metrics({ defaultMetrics: false });
  registerQueueMetrics(metrics, store);
  let text = await metrics.registry.metrics();
  t.same(lintExposition(text).problems, []);
  t.match(text, /reverie_queue_jobs\{queue="songs.render",state="ready"\} 1/, 'the queued render is counted');
  await redis.stop({ signal: 'SIGKILL' });
  const started = performance.now();
  text = await metrics.registry.metrics();
  const ms = performance.now() - started;
  t.ok(ms < 4000, `the scrape answered in ${ms.toFixed(0)} ms (queues read at once, 1 s bound), not after Redis' hold`);
  t.notMatch(text, /reverie_queue_jobs\{/, 'no stale queue numbers during the outage');
  t.same(lintExposition(text).problems, [], 'still a valid exposition');
});
