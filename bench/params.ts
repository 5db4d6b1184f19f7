/**
 * `npm run bench -- params [--requests 2000] [--seconds 3] [--concurrency 16]`: PATCH
 * /v1/streams/{id} round trip over real HTTP (keep-alive, loopback) on the embedded store with a
 * local media node, beside GET /v1/streams/{id} of the same stream measured in the same run.
 *
 * - latency: `requests` sequential requests each (hot PATCHes alternate the prompt; reload PATCHes
 *   alternate the width), p50/p95/p99;
 * - throughput: `concurrency` clients for `seconds` each, requests/s.
 * The stream has no publisher, so a PATCH is validate + merge + classify + store write + the
 * media-node client call (not delivered); the node-side apply is measured by the live benches.
 * The per-account rate limit (300/min) is raised for the run: it would otherwise be the number.
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
import { MediaNode } from '../media/index.ts';
import { createStore } from '../store/index.ts';
import { printTable, summarize, writeResult } from './lib.ts';

export default async function params(args: Map<string, string>): Promise<void> {
  const requests = Number(args.get('requests') ?? 2000);
  const seconds = Number(args.get('seconds') ?? 3);
  const concurrency = Number(args.get('concurrency') ?? 16);

  const dataDir = mkdtempSync(join(tmpdir(), 'rv-bench-params-'));
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

    let n = 0;
    const ops = {
      get: () => fetch(`${base}/v1/streams/${id}`, { method: 'GET', headers }),
      'patch hot': () => fetch(`${base}/v1/streams/${id}`, { method: 'PATCH', headers, body: JSON.stringify({ params: { prompt: `a cat ${n++}` } }) }),
      'patch reload': () => fetch(`${base}/v1/streams/${id}`, { method: 'PATCH', headers, body: JSON.stringify({ params: { width: n++ % 2 ? 512 : 576 } }) }),
    } as const;
    // fetch (Node's built-in undici) keeps connections alive between requests.
    const once = async (op: () => Promise<Response>) => {
      const res = await op();
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`status ${res.status}`);
    };

    // Warm-up: JIT, SQLite page cache, keep-alive sockets.
    for (let i = 0; i < 300; i++) for (const op of Object.values(ops)) await once(op);

    const latency: Record<string, ReturnType<typeof summarize>> = {};
    for (const [name, op] of Object.entries(ops)) {
      const samples: number[] = [];
      for (let i = 0; i < requests; i++) {
        const t0 = performance.now();
        await once(op);
        samples.push(performance.now() - t0);
      }
      latency[name] = summarize(samples);
    }

    const throughput: Record<string, number> = {};
    for (const [name, op] of Object.entries(ops)) {
      let done = 0;
      const until = performance.now() + seconds * 1000;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (performance.now() < until) {
            await once(op);
            done++;
          }
        }),
      );
      throughput[name] = done / ((performance.now() - t0) / 1000);
    }

    const g = latency['get']!;
    const rows = Object.entries(latency).map(([name, s]) => ({
      op: name,
      p50_ms: +s.p50.toFixed(3),
      p95_ms: +s.p95.toFixed(3),
      p99_ms: +s.p99.toFixed(3),
      'p50 ×GET': +(s.p50 / g.p50).toFixed(2),
      'p99 ×GET': +(s.p99 / g.p99).toFixed(2),
      req_per_s: Math.round(throughput[name]!),
      'req/s ×GET': +(throughput[name]! / throughput['get']!).toFixed(2),
    }));
    printTable(`PATCH /v1/streams/{id} vs GET (loopback HTTP, ${requests} sequential; ${concurrency} clients × ${seconds} s)`, rows);
    const file = writeResult('params', { requests, seconds, concurrency, latency, throughput, rows });
    console.log(`wrote ${file}`);
  } finally {
    await app.close();
    node.close();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
