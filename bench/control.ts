/**
 * `npm run bench -- control [--updates 1000] [--beats 60] [--bpm 400]`: live control.
 *
 * - update → ack latency of a hot change (alternating prompts) over the control WebSocket, beside
 *   the same change over PATCH /v1/streams/{id} (loopback HTTP, keep-alive) in the same run;
 *   sequential, p50/p95/p99 and the WebSocket/PATCH ratio;
 * - beat-lock error on a live stream: the real server (api + media node), an OBS-like WHIP
 *   publisher at 30 fps (libdatachannel, H.264, nothing to process), `beats` updates sent
 *   `on_beat` at `bpm`. The node lands each on the first frame captured at or after its beat and
 *   names it in the ack: error = frame_at − due_at (the frame's capture time on the node's clock −
 *   the beat), p50/p95/max beside the frame interval at 30 fps; also applied_at − due_at (when the
 *   node applied it, which waits for that frame to reach the node).
 * The latency part: embedded store and an in-process media node with no publisher, so an update
 * is validate + merge + classify + store write + the media-node client call, and the socket's ack
 * does not wait for a frame (on a live stream an immediate change is acked when the node names
 * its frame: the next frame out, one frame interval at most on top). The per-account rate limit
 * (300/min) is raised for the latency part: it would otherwise be the number.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createAccountWithKey } from '../control/ApiKeys.ts';
import { buildApp } from '../control/buildApp.ts';
import { loadConfig } from '../control/config.ts';
import { InProcessMediaNodeClient } from '../streams/InProcessMediaNodeClient.ts';
import { Metrics } from '../control/Metrics.ts';
import { StreamService } from '../streams/StreamService.ts';
import { connectWebSocket } from '../control/WebSockets.ts';
import { MediaNode } from '../media/index.ts';
import { createStore } from '../store/index.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { startLiveServer } from '../test/helpers/liveServer.ts';
import { ObsPublishers } from '../test/helpers/obsPublisher.ts';
import { printTable, summarize, writeResult } from './lib.ts';

type Json = Record<string, any>;

export default async function control(args: Map<string, string>): Promise<void> {
  const updates = Number(args.get('updates') ?? 1000);
  const beats = Number(args.get('beats') ?? 60);
  const bpm = Number(args.get('bpm') ?? 400);

  const dataDir = mkdtempSync(join(tmpdir(), 'rv-bench-control-'));
  const logger = pino({ level: 'silent' });
  const config = loadConfig({}, { DATA_DIR: dataDir, LOG_LEVEL: 'silent', PORT: 0, PUBLIC_URL: 'http://127.0.0.1:1' });
  const store = await createStore({ dataDir });
  const node = new MediaNode({ publicUrl: config.publicUrl, logger, resolveIngest: async () => null, resolvePlayback: async () => null });
  const media = new InProcessMediaNodeClient({ node, models: ['stabilityai/sd-turbo'], demo: true, logger });
  const service = new StreamService({ store, media, publicUrl: config.publicUrl, logger, updateRate: { max: 1e9, windowMs: 60_000 } });
  const app = await buildApp(config, { store, logger, metrics: new Metrics({ defaultMetrics: false }), streams: service });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;
  const base = `http://127.0.0.1:${port}`;

  try {
    const { key } = await createAccountWithKey(store, 'internal');
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const created = await fetch(`${base}/v1/streams`, { method: 'POST', headers, body: JSON.stringify({ params: { prompt: 'a cat' } }) });
    const id = ((await created.json()) as { id: string }).id;

    const ws = connectWebSocket(`ws://127.0.0.1:${port}/v1/streams/${id}/control`, { authorization: `Bearer ${key}` });
    const waiting = new Map<string, (m: Json) => void>();
    let hello: Json | null = null;
    await new Promise<void>((resolve, reject) => {
      ws.on('message', (data) => {
        const m = JSON.parse(data.toString('utf8')) as Json;
        if (m.type === 'hello') {
          hello = m;
          resolve();
        }
        if ((m.type === 'ack' || m.type === 'error') && typeof m.id === 'string') waiting.get(m.id)?.(m);
      });
      ws.once('error', reject);
    });
    let n = 0;
    const viaSocket = (extra: Json = {}) =>
      new Promise<Json>((resolve) => {
        const msgId = `b${n++}`;
        waiting.set(msgId, (m) => {
          waiting.delete(msgId);
          resolve(m);
        });
        ws.send(JSON.stringify({ type: 'update', id: msgId, params: { prompt: `a cat ${n}` }, ...extra }));
      });
    const viaPatch = async () => {
      const res = await fetch(`${base}/v1/streams/${id}`, { method: 'PATCH', headers, body: JSON.stringify({ params: { prompt: `a cat ${n++}` } }) });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`PATCH ${res.status}`);
    };

    // Warm-up: JIT, SQLite page cache, keep-alive sockets.
    for (let i = 0; i < 200; i++) {
      await viaSocket();
      await viaPatch();
    }
    const samples: Record<string, number[]> = { websocket: [], patch: [] };
    // Interleaved, so both see the same machine state.
    for (let i = 0; i < updates; i++) {
      let t0 = performance.now();
      const ack = await viaSocket();
      if (ack.type !== 'ack') throw new Error(`socket: ${JSON.stringify(ack)}`);
      samples['websocket']!.push(performance.now() - t0);
      t0 = performance.now();
      await viaPatch();
      samples['patch']!.push(performance.now() - t0);
    }
    const ws50 = summarize(samples['websocket']!);
    const patch50 = summarize(samples['patch']!);

    void hello;
    const { beatErrors, appliedErrors, late } = await beatLock(beats, bpm);
    const beat = summarize(beatErrors);
    const applied = summarize(appliedErrors);
    const frameMs = 1000 / 30;

    const rows = [
      { op: 'hot update → ack, WebSocket', p50_ms: +ws50.p50.toFixed(3), p95_ms: +ws50.p95.toFixed(3), p99_ms: +ws50.p99.toFixed(3), 'p50 ×PATCH': +(ws50.p50 / patch50.p50).toFixed(2) },
      { op: 'hot update → 200, PATCH', p50_ms: +patch50.p50.toFixed(3), p95_ms: +patch50.p95.toFixed(3), p99_ms: +patch50.p99.toFixed(3), 'p50 ×PATCH': 1 },
      { op: `on_beat error at ${bpm} bpm (frame capture − beat)`, p50_ms: +beat.p50.toFixed(3), p95_ms: +beat.p95.toFixed(3), p99_ms: +Math.max(...beatErrors).toFixed(3), 'p50 ×PATCH': NaN },
      { op: `on_beat, node applied − beat`, p50_ms: +applied.p50.toFixed(3), p95_ms: +applied.p95.toFixed(3), p99_ms: +Math.max(...appliedErrors).toFixed(3), 'p50 ×PATCH': NaN },
    ];
    printTable(`Live control (loopback, ${updates} updates each way, interleaved; ${beats} on_beat updates on a live 30 fps stream; frame interval = ${frameMs.toFixed(1)} ms; last column of the beat rows: max)`, rows);
    const within = beatErrors.filter((e) => e <= frameMs + 0.01).length;
    console.log(`beat-lock p95 = ${(beat.p95 / frameMs).toFixed(3)} frame intervals (target ≤ 1); ${within}/${beats} within one frame interval, ${late} reached the node after their frame had gone; WebSocket p50 = ${(ws50.p50 / patch50.p50).toFixed(2)} × PATCH (target ≤ 0.5)`);
    const file = writeResult('control', { updates, beats, bpm, websocket: ws50, patch: patch50, beatError: { ...beat, max: Math.max(...beatErrors) }, appliedError: { ...applied, max: Math.max(...appliedErrors) }, beatErrors, late, frameMs, rows });
    console.log(`wrote ${file}`);
    ws.close();
  } finally {
    await app.close();
    node.close();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * `beats` on_beat updates on a live stream (real server, a 30 fps WHIP publisher, nothing to
 * process): per update, frame_at − due_at and applied_at − due_at, ms.
 */
async function beatLock(beats: number, bpm: number): Promise<{ beatErrors: number[]; appliedErrors: number[]; late: number }> {
  const teardowns: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => void teardowns.push(fn) };
  try {
    const { server, api, key } = await startLiveServer(t, { env: { ROLES: 'api,media' } });
    const created = await api('POST', '/v1/streams', { params: { prompt: 'beats', width: 384, height: 384, skip_diffusion: true } });
    const id = created.body['id'] as string;
    const pubs = new ObsPublishers();
    teardowns.push(() => pubs.close());
    const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source: await stampedH264({ size: 256, frames: 300, fps: 30 }) });
    if (pub.status !== 201) throw new Error(`publish: ${pub.status} ${pub.body}`);
    const ws = connectWebSocket(`${server.url.replace('http', 'ws')}/v1/streams/${id}/control`, { authorization: `Bearer ${key}` });
    teardowns.push(() => ws.terminate());
    const waiting: { pred: (m: Json) => boolean; resolve: (m: Json) => void }[] = [];
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString('utf8')) as Json;
      const i = waiting.findIndex((w) => w.pred(m));
      if (i >= 0) waiting.splice(i, 1)[0]!.resolve(m);
    });
    const next = (pred: (m: Json) => boolean, timeoutMs: number) =>
      new Promise<Json>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('beat bench: no answer in time')), timeoutMs);
        waiting.push({ pred, resolve: (m) => (clearTimeout(timer), resolve(m)) });
      });
    const hello = next((m) => m.type === 'hello', 10_000);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const phase = (await hello).server_time as number;
    await next((m) => m.type === 'stats' && m.output_fps > 20, 60_000);
    ws.send(JSON.stringify({ type: 'tempo', bpm, phase }));
    await next((m) => m.type === 'tempo', 5000);
    const beatErrors: number[] = [];
    const appliedErrors: number[] = [];
    // Changes that reached the node after the first frame at or after their beat had gone through.
    let late = 0;
    for (let i = 0; i < beats; i++) {
      const ack = next((m) => m.type === 'ack' && m.id === `beat${i}`, 10_000);
      ws.send(JSON.stringify({ type: 'update', id: `beat${i}`, params: { seed: i }, on_beat: true }));
      const a = await ack;
      if (typeof a.frame_at !== 'number') throw new Error(`beat ${i}: no frame in ${JSON.stringify(a)}`);
      beatErrors.push(a.frame_at - a.due_at);
      if (typeof a.prev_frame_at === 'number' && a.prev_frame_at >= a.due_at) late++;
      appliedErrors.push(a.applied_at - a.due_at);
    }
    await pubs.stop(pub.id);
    return { beatErrors, appliedErrors, late };
  } finally {
    for (const fn of teardowns.reverse()) await fn();
  }
}
