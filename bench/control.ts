/**
 * `npm run bench -- control [--updates 1000] [--beats 60] [--bpm 400]`: live control.
 *
 * - update → ack latency of a hot change (alternating prompts) over the control WebSocket, beside
 *   the same change over PATCH /v1/streams/{id} (loopback HTTP, keep-alive) in the same run;
 *   sequential, p50/p95/p99 and the WebSocket/PATCH ratio;
 * - beat-lock error: `beats` updates sent `on_beat` at `bpm`, each measured as applied_at − due_at
 *   (ms; the server's own timestamps), p50/p95/max beside the frame interval at 30 fps.
 * Embedded store and an in-process media node with no publisher: an update is validate + merge +
 * classify + store write + the media-node client call. The per-account rate limit (300/min) is
 * raised for the run: it would otherwise be the number.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createAccountWithKey } from '../control/ApiKeys.ts';
import { buildApp } from '../control/buildApp.ts';
import { loadConfig } from '../control/config.ts';
import { LocalMediaNodeClient } from '../streams/LocalMediaNodeClient.ts';
import { Metrics } from '../control/Metrics.ts';
import { StreamService } from '../streams/StreamService.ts';
import { connectWebSocket } from '../control/WebSockets.ts';
import { MediaNode } from '../media/index.ts';
import { createStore } from '../store/index.ts';
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
  const media = new LocalMediaNodeClient({ node, models: ['stabilityai/sd-turbo'], demo: true, logger });
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

    // Beat lock: a fresh tempo from the server's clock, then one update per beat.
    ws.send(JSON.stringify({ type: 'tempo', bpm, phase: (hello as Json | null)?.['server_time'] ?? Date.now() }));
    const beatErrors: number[] = [];
    for (let i = 0; i < beats; i++) {
      const ack = await viaSocket({ on_beat: true });
      if (ack.type !== 'ack') throw new Error(`beat: ${JSON.stringify(ack)}`);
      beatErrors.push(ack.applied_at - ack.due_at);
    }
    const beat = summarize(beatErrors);
    const frameMs = 1000 / 30;

    const rows = [
      { op: 'hot update → ack, WebSocket', p50_ms: +ws50.p50.toFixed(3), p95_ms: +ws50.p95.toFixed(3), p99_ms: +ws50.p99.toFixed(3), 'p50 ×PATCH': +(ws50.p50 / patch50.p50).toFixed(2) },
      { op: 'hot update → 200, PATCH', p50_ms: +patch50.p50.toFixed(3), p95_ms: +patch50.p95.toFixed(3), p99_ms: +patch50.p99.toFixed(3), 'p50 ×PATCH': 1 },
      { op: `on_beat error at ${bpm} bpm (applied − beat)`, p50_ms: +beat.p50.toFixed(3), p95_ms: +beat.p95.toFixed(3), p99_ms: +Math.max(...beatErrors).toFixed(3), 'p50 ×PATCH': NaN },
    ];
    printTable(`Live control (loopback, ${updates} updates each way, interleaved; ${beats} on_beat updates; frame interval at 30 fps = ${frameMs.toFixed(1)} ms)`, rows);
    console.log(`beat-lock p95 = ${(beat.p95 / frameMs).toFixed(3)} frame intervals (target ≤ 1); WebSocket p50 = ${(ws50.p50 / patch50.p50).toFixed(2)} × PATCH (target ≤ 0.5)`);
    const file = writeResult('control', { updates, beats, bpm, websocket: ws50, patch: patch50, beatError: { ...beat, max: Math.max(...beatErrors) }, frameMs, rows });
    console.log(`wrote ${file}`);
    ws.close();
  } finally {
    await app.close();
    node.close();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
