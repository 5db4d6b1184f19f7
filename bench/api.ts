/**
 * `npm run bench -- api [--seconds 5] [--rounds 5] [--connections 32] [--profile]`: requests/s and p50/p99 latency of an
 * authenticated trivial route (GET /music/v1/usage: auth lookup + one store read) against a bare
 * fastify route and against the same route with the key → account cache off (AUTH_CACHE_TTL=0),
 * in the same run, over real HTTP on loopback, as a ratio. The load comes from a
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
import { percentile, printTable, profileShares, progress, RESULTS_DIR, summarize, writeResult, type CpuProfile } from './lib.ts';

export default async function bench(args: Map<string, string>): Promise<void> {
  const seconds = Number(args.get('seconds') ?? 5);
  const connections = Number(args.get('connections') ?? 32);
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-bench-api-'));
  const config = loadConfig({}, { DATA_DIR: dataDir, LOG_LEVEL: 'silent', PORT: 0 });
  const store = await createStore({ dataDir });
  const logger = pino({ level: 'silent' });
  const songs = new SongService({ store, planner: () => ({ bpm: 100, key: null, duration: 120, sections: [], plan: {} }), canRender: async () => true });
  const app = await buildApp(config, { store, logger, metrics: new Metrics(), blobs: new FsBlobStore(join(dataDir, 'blobs')), links: LinkSigner.fromConfig(null, dataDir), songs });
  await app.listen({ port: 0, host: '127.0.0.1' });
  // The same app with the key → account cache off: the route as it was before the cache.
  const uncached = await buildApp(loadConfig({}, { DATA_DIR: dataDir, LOG_LEVEL: 'silent', PORT: 0, AUTH_CACHE_TTL: '0' }), { store, logger, metrics: new Metrics(), blobs: new FsBlobStore(join(dataDir, 'blobs')), links: LinkSigner.fromConfig(null, dataDir), songs });
  await uncached.listen({ port: 0, host: '127.0.0.1' });
  const { key } = await createAccountWithKey(store, 'free');

  // The baseline: fastify with no plugins, one route answering a small JSON object.
  const bare = Fastify({ logger: false });
  bare.get('/ping', async () => ({ plan: 'free', limit: 10, used: 0, resets_at: new Date().toISOString() }));
  await bare.listen({ port: 0, host: '127.0.0.1' });

  const ourUrl = `http://127.0.0.1:${(app.server.address() as { port: number }).port}${config.musicBasePath}/usage`;
  const uncachedUrl = `http://127.0.0.1:${(uncached.server.address() as { port: number }).port}${config.musicBasePath}/usage`;
  const bareUrl = `http://127.0.0.1:${(bare.server.address() as { port: number }).port}/ping`;
  const auth = { authorization: `Bearer ${key}` };

  const rounds = Number(args.get('rounds') ?? 5);
  const window = seconds / rounds; // each target gets `seconds` in all
  const targets = [
    { route: `GET ${config.musicBasePath}/usage (auth + store)`, url: ourUrl, headers: auth },
    { route: `  same, AUTH_CACHE_TTL=0 (reads key + account each time)`, url: uncachedUrl, headers: auth },
    { route: 'bare fastify GET /ping', url: bareUrl, headers: {} },
  ];
  const bar = progress('api bench', rounds + 1);
  // Warm-up all (JIT, connection pools), then measure in short alternating windows so a load
  // swing on a shared machine hits every target alike; each round gives one ratio per target.
  for (const x of targets) await httpLoad({ url: x.url, headers: x.headers, seconds: 1, connections });
  bar.tick();
  const inspector = args.has('profile') ? new Session() : null;
  const runs = targets.map(() => [] as Awaited<ReturnType<typeof httpLoad>>[]);
  let shares: Map<string, number> | null = null;
  for (let r = 0; r < rounds; r++) {
    for (const [i, x] of targets.entries()) {
      const profiling = inspector !== null && r === 0 && i === 0;
      if (profiling) {
        inspector.connect();
        await inspector.post('Profiler.enable');
        // 100 µs (V8's default is 1 ms): a 1 s window then holds enough samples to split 10 ways.
        await inspector.post('Profiler.setSamplingInterval', { interval: 100 });
        await inspector.post('Profiler.start');
      }
      runs[i]!.push(await httpLoad({ url: x.url, headers: x.headers, seconds: window, connections }));
      if (profiling) {
        const { profile } = await inspector.post('Profiler.stop');
        inspector.disconnect();
        mkdirSync(RESULTS_DIR, { recursive: true });
        const out = join(RESULTS_DIR, `api-ours-${new Date().toISOString().replace(/[:.]/g, '-')}.cpuprofile`);
        writeFileSync(out, JSON.stringify(profile));
        console.log(`\nwrote ${out}`);
        shares = profileShares(profile as CpuProfile, classifyFrame, PROFILER);
      }
    }
    bar.tick();
  }
  bar.done();

  const bareRuns = runs[2]!;
  const median = (xs: number[]): number => summarize(xs).p50;
  const results = targets.map((x, i) => {
    const rs = runs[i]!;
    const lat = summarize(rs.flatMap((run) => run.latenciesMs));
    const ratios = rs.map((run, k) => run.rps / bareRuns[k]!.rps);
    return {
      route: x.route,
      rps: median(rs.map((run) => run.rps)),
      ratio: median(ratios),
      // The p95 and p5 of the per-round ratios: how far one round strays (the ratio is read
      // from rounds side by side, so a load swing moves both targets of a round alike).
      ratioP95: summarize(ratios).p95,
      ratioP5: percentile(ratios, 5),
      ratios,
      lat,
      errors: rs.reduce((n, run) => n + run.errors, 0),
      timeouts: rs.reduce((n, run) => n + run.timeouts, 0),
    };
  });
  const rows = results.map((x) => ({ route: x.route, 'req/s (median)': x.rps, 'ratio to bare (median of rounds)': x.ratio, 'ratio p5': x.ratioP5, 'ratio p95': x.ratioP95, 'p50 ms': x.lat.p50, 'p95 ms': x.lat.p95, 'p99 ms': x.lat.p99, errors: x.errors, timeouts: x.timeouts }));
  printTable(`api: ${connections} connections, ${rounds} rounds of ${window} s per target, store ${store.kind}, auth cache ${config.authCache.ttlMs} ms`, rows);
  if (shares) printTable(`where the server thread's busy time went on ${targets[0]!.route}, first window`, [...shares].map(([part, share]) => ({ part, 'share of busy time': `${(share * 100).toFixed(1)} %` })));
  const path = writeResult('api', { seconds, rounds, connections, results, profileShares: shares ? Object.fromEntries(shares) : null });
  console.log(`\nwrote ${path}`);

  await app.close();
  await uncached.close();
  await bare.close();
  await store.close();
  rmSync(dataDir, { recursive: true, force: true });
}

/** The bench's own frames (starting and stopping the profiler): not the server's work. */
const PROFILER = 'profiler';

/**
 * The part of the request path a profile frame belongs to (null: its caller's part). Native
 * frames, crypto and buffers count for whoever called them (a random id for the hook that makes it).
 */
function classifyFrame({ functionName, url }: { functionName: string; url: string }): string | null {
  if (functionName === '(garbage collector)') return 'gc';
  if (functionName === '(program)') return 'other (V8, native)';
  if (/\/node_modules\/(pino|pino-std-serializers|sonic-boom|thread-stream|fast-redact)\//.test(url)) return 'pino';
  if (url.includes('/node_modules/prom-client/')) return 'prom-client (counter + histogram)';
  if (/\/node_modules\/(zod|fastify-type-provider-zod|fast-json-stringify)\//.test(url) || url.endsWith('/control/ResponseSerializer.ts')) return 'response serialiser';
  if (/\/node_modules\/(fastify|find-my-way|@fastify|light-my-request|avvio|fast-querystring|toad-cache|process-warning)\//.test(url)) return 'fastify (routing, hooks, reply)';
  if (url.includes('/store/') || url.includes('sqlite')) return 'store reads (SQLite)';
  if (functionName === 'auth' || /\/control\/(AccountCache|ApiKeys)\.ts$/.test(url)) return functionName === 'traceIdFrom' ? 'our hooks (request id, trace id, log line, metrics)' : 'auth (SHA-256 of the key, cache)';
  if (/\/(control\/routes|songs)\//.test(url)) return 'route handler (usage)';
  if (url.includes('/control/')) return 'our hooks (request id, trace id, log line, metrics)';
  if (url.includes('/bench/') || url === 'node:inspector') return PROFILER;
  if (url.startsWith('node:') && !/^node:(internal\/)?(crypto|buffer|util)/.test(url)) return 'node http/net (parse, write, event loop)';
  return null;
}
