/**
 * `npm run bench -- api [--seconds 5] [--connections 32] [--auth-cache-ttl 2] [--profile]`: requests/s and p50/p99 latency of an
 * authenticated trivial route (GET /music/v1/usage: auth lookup + one store read) against a bare
 * fastify route in the same run, over real HTTP on loopback, as a ratio. The load comes from a
 * worker thread so it does not share the servers' event loop. `--profile` also writes a V8 CPU
 * profile of the servers' thread during the first measured window of our route (open it in
 * Chrome DevTools, or sum it by package) to bench/results/.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import pino from 'pino';
import { createAccountWithKey } from '../control/ApiKeys.ts';
import { buildApp } from '../control/buildApp.ts';
import { loadConfig } from '../control/config.ts';
import { LinkSigner } from '../control/LinkSigner.ts';
import { Metrics } from '../control/Metrics.ts';
import { SongService } from '../songs/SongService.ts';
import { createStore, FsBlobStore } from '../store/index.ts';
import { httpLoad } from './httpLoad.ts';
import { printTable, progress, RESULTS_DIR, summarize, writeResult } from './lib.ts';

export default async function bench(args: Map<string, string>): Promise<void> {
  const seconds = Number(args.get('seconds') ?? 5);
  const connections = Number(args.get('connections') ?? 32);
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-bench-api-'));
  // --auth-cache-ttl 0 measures the route as it was before the key → account cache.
  const authTtl = args.get('auth-cache-ttl');
  const config = loadConfig({}, { DATA_DIR: dataDir, LOG_LEVEL: 'silent', PORT: 0, ...(authTtl !== undefined ? { AUTH_CACHE_TTL: authTtl } : {}) });
  const store = await createStore({ dataDir });
  const logger = pino({ level: 'silent' });
  const songs = new SongService({ store, planner: () => ({ bpm: 100, key: null, duration: 120, sections: [], plan: {} }), canRender: async () => true });
  const app = await buildApp(config, { store, logger, metrics: new Metrics(), blobs: new FsBlobStore(join(dataDir, 'blobs')), links: LinkSigner.fromConfig(null, dataDir), songs });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { key } = await createAccountWithKey(store, 'free');

  // The baseline: fastify with no plugins, one route answering a small JSON object.
  const bare = Fastify({ logger: false });
  bare.get('/ping', async () => ({ plan: 'free', limit: 10, used: 0, resets_at: new Date().toISOString() }));
  await bare.listen({ port: 0, host: '127.0.0.1' });

  const ourUrl = `http://127.0.0.1:${(app.server.address() as { port: number }).port}${config.musicBasePath}/usage`;
  const bareUrl = `http://127.0.0.1:${(bare.server.address() as { port: number }).port}/ping`;
  const auth = { authorization: `Bearer ${key}` };

  const bar = progress('api bench', 4);
  // Warm-up both (JIT, connection pools), then measure alternately so drift hits both alike.
  await httpLoad({ url: ourUrl, headers: auth, seconds: 1, connections });
  await httpLoad({ url: bareUrl, headers: {}, seconds: 1, connections });
  bar.tick();
  const inspector = args.has('profile') ? new Session() : null;
  if (inspector) {
    inspector.connect();
    await inspector.post('Profiler.enable');
    await inspector.post('Profiler.start');
  }
  const oursA = await httpLoad({ url: ourUrl, headers: auth, seconds: seconds / 2, connections });
  if (inspector) {
    const { profile } = await inspector.post('Profiler.stop');
    inspector.disconnect();
    mkdirSync(RESULTS_DIR, { recursive: true });
    const out = join(RESULTS_DIR, `api-ours-${new Date().toISOString().replace(/[:.]/g, '-')}.cpuprofile`);
    writeFileSync(out, JSON.stringify(profile));
    console.log(`\nwrote ${out}`);
  }
  bar.tick();
  const bareA = await httpLoad({ url: bareUrl, headers: {}, seconds: seconds / 2, connections });
  bar.tick();
  const oursB = await httpLoad({ url: ourUrl, headers: auth, seconds: seconds / 2, connections });
  const bareB = await httpLoad({ url: bareUrl, headers: {}, seconds: seconds / 2, connections });
  bar.done();

  const ours = { rps: (oursA.rps + oursB.rps) / 2, lat: summarize([...oursA.latenciesMs, ...oursB.latenciesMs]), errors: oursA.errors + oursB.errors };
  const base = { rps: (bareA.rps + bareB.rps) / 2, lat: summarize([...bareA.latenciesMs, ...bareB.latenciesMs]), errors: bareA.errors + bareB.errors };
  const rows = [
    { route: 'GET /music/v1/usage (auth + store)', 'req/s': ours.rps, 'p50 ms': ours.lat.p50, 'p95 ms': ours.lat.p95, 'p99 ms': ours.lat.p99, errors: ours.errors },
    { route: 'bare fastify GET /ping', 'req/s': base.rps, 'p50 ms': base.lat.p50, 'p95 ms': base.lat.p95, 'p99 ms': base.lat.p99, errors: base.errors },
    { route: 'ratio ours/bare', 'req/s': ours.rps / base.rps, 'p50 ms': ours.lat.p50 / base.lat.p50, 'p95 ms': ours.lat.p95 / base.lat.p95, 'p99 ms': ours.lat.p99 / base.lat.p99, errors: '' },
  ];
  printTable(`api: ${connections} connections, ${seconds} s per side, store ${store.kind}, auth cache ${config.authCache.ttlMs} ms`, rows);
  const path = writeResult('api', { seconds, connections, ours, bare: base, ratio: { rps: ours.rps / base.rps, p50: ours.lat.p50 / base.lat.p50, p99: ours.lat.p99 / base.lat.p99 } });
  console.log(`\nwrote ${path}`);

  await app.close();
  await bare.close();
  await store.close();
  rmSync(dataDir, { recursive: true, force: true });
}
