/**
 * `npm run bench -- scaleout [--patches 1000] [--songs 6] [--duration 10]`
 *
 * 1. PATCH-to-apply latency: `PATCH /v1/streams/{id}` (hot prompt) over real loopback HTTP; the
 *    reply comes after the owning node applied the change (the node's answer is awaited), so the
 *    round trip bounds PATCH → applied. Three set-ups, measured in the same run:
 *    - `one process, direct`: the embedded default (embedded store, InProcessMediaNodeClient) — baseline;
 *    - `one process, bus`: embedded store, the scale-out client and agent over the in-process bus;
 *    - `across processes, Redis`: Redis store; the node and its MediaNodeAgent in a child process,
 *      reached over Redis pub/sub (what `--roles api` → `--roles media` does).
 *    The stream is held by the node without a publisher (the apply is LiveStream.updateParams, the
 *    same call a live pipeline gets). After each run the node's status must show the last prompt.
 * 2. Song throughput with 1 vs 2 `reverie serve --roles worker` processes (1 render thread each)
 *    on one Redis: `songs` songs queued at once, time until all are done, songs/min.
 *    On this 2-core machine two workers can at best double it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createAccountWithKey } from '../control/ApiKeys.ts';
import { BusMediaNodeClient } from '../streams/BusMediaNodeClient.ts';
import { buildApp } from '../control/buildApp.ts';
import { loadConfig } from '../control/config.ts';
import { InProcessMediaNodeClient } from '../streams/InProcessMediaNodeClient.ts';
import { MediaNodeAgent } from '../streams/MediaNodeAgent.ts';
import type { MediaNodeClient } from '../streams/MediaNodeClient.ts';
import { Metrics } from '../control/Metrics.ts';
import { enginePlanner } from '../control/SongRoles.ts';
import { StreamService } from '../streams/StreamService.ts';
import { MediaNode } from '../media/index.ts';
import { SongService } from '../songs/index.ts';
import { createStore, RedisStore, type Store } from '../store/index.ts';
import { freePort } from '../test/helpers/net.ts';
import { startRedis } from '../test/helpers/redis.ts';
import { printTable, progress, summarize, writeResult, type Summary } from './lib.ts';

const ROOT = new URL('..', import.meta.url).pathname;
const MODEL = 'stabilityai/sd-turbo';
const logger = pino({ level: 'silent' });

// ───────────────────────────── child: a media node + agent on Redis (argv: --media-agent url nodeId)

if (process.argv[2] === '--media-agent') {
  const [url = '', nodeId = ''] = process.argv.slice(3);
  const store = await RedisStore.open({ url, prefix: 'bench:' });
  const node = new MediaNode({ publicUrl: 'http://127.0.0.1:1', logger, resolveIngest: async () => null, resolvePlayback: async () => null });
  const local = new InProcessMediaNodeClient({ node, nodeId, models: [MODEL], demo: true, logger });
  const agent = new MediaNodeAgent({ store, local, logger });
  await agent.start();
  process.stdin.on('data', (d) => {
    // "hold <streamId>": the node keeps the stream (idle, no publisher) so updates are applied.
    for (const line of String(d).split('\n')) if (line.startsWith('hold ')) node.createStream(line.slice(5).trim());
    process.stdout.write('held\n');
  });
  process.stdout.write('ready\n');
  process.stdin.on('end', () => {
    node.close();
    void agent.close().then(() => store.close()).then(() => process.exit(0));
  });
}

// ───────────────────────────── helpers

interface Child {
  child: ChildProcess;
  lines: AsyncIterator<string>;
  stop(): Promise<void>;
}

function startChild(args: string[], env: Record<string, string> = {}, ready: RegExp = /^ready$/m): Promise<Child> {
  const child = spawn(process.execPath, ['--import', 'tsx', ...args], { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  const exited = once(child, 'exit');
  const waiters: ((line: string) => void)[] = [];
  const queue: string[] = [];
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    let nl;
    while ((nl = out.indexOf('\n')) >= 0) {
      const line = out.slice(0, nl);
      out = out.slice(nl + 1);
      const w = waiters.shift();
      if (w) w(line);
      else queue.push(line);
    }
  });
  const lines: AsyncIterator<string> = {
    next: () => (queue.length ? Promise.resolve({ value: queue.shift()!, done: false }) : new Promise((resolve) => waiters.push((value) => resolve({ value, done: false })))),
  };
  const handle: Child = {
    child,
    lines,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.stdin.end();
      child.kill('SIGTERM');
      await exited;
    },
  };
  return new Promise((resolve, reject) => {
    void exited.then(() => reject(new Error(`child exited before ready: ${err}`)));
    (async () => {
      for (;;) {
        const { value } = await lines.next();
        if (ready.test(value)) return resolve(handle);
      }
    })().catch(reject);
  });
}

/** Sequential hot PATCHes over HTTP against an app on `store` + `media`; returns latencies. */
async function patchLatency(label: string, store: Store, media: MediaNodeClient, n: number, hold: (streamId: string) => Promise<void>): Promise<Summary> {
  const config = loadConfig({}, { DATA_DIR: tmpdir(), LOG_LEVEL: 'silent', PORT: 0, PUBLIC_URL: 'http://127.0.0.1:1' });
  const service = new StreamService({ store, media, publicUrl: config.publicUrl, logger, updateRate: { max: 1e9, windowMs: 60_000 } });
  const app = await buildApp(config, { store, logger, metrics: new Metrics({ defaultMetrics: false }), streams: service });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  try {
    const { key } = await createAccountWithKey(store, 'internal');
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const created = (await (await fetch(`${base}/v1/streams`, { method: 'POST', headers, body: JSON.stringify({ params: { prompt: 'a cat' } }) })).json()) as { id: string };
    const record = await store.streams.get(created.id);
    if (!record?.nodeId) throw new Error(`${label}: stream not placed`);
    await hold(created.id);
    let i = 0;
    const patch = async () => {
      const res = await fetch(`${base}/v1/streams/${created.id}`, { method: 'PATCH', headers, body: JSON.stringify({ params: { prompt: `a cat ${i++}` } }) });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`${label}: PATCH ${res.status}`);
    };
    for (let w = 0; w < 100; w++) await patch(); // warm-up: JIT, sockets, Redis connections
    const samples: number[] = [];
    const bar = progress(label, n);
    for (let k = 0; k < n; k++) {
      const t0 = performance.now();
      await patch();
      samples.push(performance.now() - t0);
      bar.tick();
    }
    bar.done();
    const status = await media.status(record.nodeId, created.id);
    if (status?.lastParams['prompt'] !== `a cat ${i - 1}`) throw new Error(`${label}: the node did not apply the last PATCH (${JSON.stringify(status?.lastParams['prompt'])})`);
    return summarize(samples);
  } finally {
    await app.close();
  }
}

// ───────────────────────────── the benchmark

export default async function scaleout(args: Map<string, string>): Promise<void> {
  const patches = Number(args.get('patches') ?? 1000);
  const songs = Number(args.get('songs') ?? 6);
  const duration = Number(args.get('duration') ?? 10);
  const dir = mkdtempSync(join(tmpdir(), 'rv-bench-scaleout-'));
  const redis = await startRedis();
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    // ── 1a: one process, direct calls (the embedded default)
    const direct = await (async () => {
      const store = await createStore({ dataDir: join(dir, 'direct') });
      const node = new MediaNode({ publicUrl: 'http://127.0.0.1:1', logger, resolveIngest: async () => null, resolvePlayback: async () => null });
      const media = new InProcessMediaNodeClient({ node, models: [MODEL], demo: true, logger });
      try {
        return await patchLatency('one process, direct', store, media, patches, async (id) => void node.createStream(id));
      } finally {
        node.close();
        await store.close();
      }
    })();

    // ── 1b: one process, the scale-out client + agent over the embedded (in-process) bus
    const localBus = await (async () => {
      const store = await createStore({ dataDir: join(dir, 'bus') });
      const node = new MediaNode({ publicUrl: 'http://127.0.0.1:1', logger, resolveIngest: async () => null, resolvePlayback: async () => null });
      const agent = new MediaNodeAgent({ store, local: new InProcessMediaNodeClient({ node, nodeId: 'node-a', models: [MODEL], demo: true, logger }), logger });
      await agent.start();
      const media = new BusMediaNodeClient({ store, logger });
      try {
        return await patchLatency('one process, bus', store, media, patches, async (id) => void node.createStream(id));
      } finally {
        node.close();
        await agent.close();
        await media.close();
        await store.close();
      }
    })();

    // ── 1c: across processes over Redis
    const redisStore = await RedisStore.open({ url: redis.url, prefix: 'bench:' });
    cleanups.push(() => redisStore.close());
    const agentChild = await startChild([join(ROOT, 'bench/scaleout.ts'), '--media-agent', redis.url, 'node-b']);
    cleanups.push(() => agentChild.stop());
    const remote = new BusMediaNodeClient({ store: redisStore, logger });
    cleanups.push(() => remote.close());
    const across = await patchLatency('across processes, Redis', redisStore, remote, patches, async (id) => {
      agentChild.child.stdin?.write(`hold ${id}\n`);
      await agentChild.lines.next();
    });

    const rows = [
      { setup: 'one process, direct (baseline)', ...ms(direct), 'p50 ×base': 1, 'p95 ×base': 1 },
      { setup: 'one process, bus', ...ms(localBus), 'p50 ×base': ratio(localBus.p50, direct.p50), 'p95 ×base': ratio(localBus.p95, direct.p95) },
      { setup: 'across processes, Redis', ...ms(across), 'p50 ×base': ratio(across.p50, direct.p50), 'p95 ×base': ratio(across.p95, direct.p95) },
    ];
    printTable(`PATCH → applied on the node (hot prompt, loopback HTTP, ${patches} sequential)`, rows);

    // ── 2: song throughput, 1 vs 2 worker processes
    const throughput: { workers: number; seconds: number; songsPerMin: number }[] = [];
    const svc = new SongService({ store: redisStore, planner: enginePlanner, canRender: async () => true });
    for (const workers of [1, 2]) {
      const procs = await Promise.all(
        Array.from({ length: workers }, async () => {
          const port = await freePort();
          return startChild([join(ROOT, 'control/main.ts'), 'serve', '--roles', 'worker', '--port', String(port)], {
            REDIS_URL: redis.url,
            REDIS_PREFIX: 'bench:',
            DATA_DIR: join(dir, 'data'),
            LOG_LEVEL: 'warn',
            RENDER_WORKERS: '1',
            LINK_SIGNING_SECRET: 'bench-secret-0123456789abcdef0123456789',
          }, /Reverie is running/);
        }),
      );
      try {
        const t0 = performance.now();
        const ids: string[] = [];
        for (let i = 0; i < songs; i++) {
          // One account per song: an account may only have a few songs in flight (spec limits).
          const { account } = await createAccountWithKey(redisStore, 'internal');
          const out = await svc.create(account, { prompt: `bench song ${workers}-${i}`, duration, seed: i, variations: 1 });
          if (!out.ok) throw new Error(`song refused: ${out.reason}`);
          ids.push(out.song.id);
        }
        const bar = progress(`${workers} worker(s)`, songs);
        const pending = new Set(ids);
        while (pending.size > 0) {
          for (const id of [...pending]) {
            const s = await redisStore.songs.get(id);
            if (s?.status === 'failed') throw new Error(`song ${id} failed: ${JSON.stringify(s.error)}`);
            if (s?.status === 'done') {
              pending.delete(id);
              bar.tick();
            }
          }
          if (pending.size > 0) await new Promise((r) => setTimeout(r, 100));
        }
        bar.done();
        const seconds = (performance.now() - t0) / 1000;
        throughput.push({ workers, seconds: +seconds.toFixed(2), songsPerMin: +((songs / seconds) * 60).toFixed(2) });
      } finally {
        await Promise.all(procs.map((p) => p.stop()));
      }
    }
    const one = throughput[0]!;
    printTable(`Song throughput (${songs} songs of ${duration} s, 1 render thread per worker process)`, throughput.map((r) => ({ ...r, '×1 worker': ratio(r.songsPerMin, one.songsPerMin) })));

    // Two workers can only beat one when there are idle cores: say how busy the machine was.
    const machine = { cores: cpus().length, loadavg1m: +(loadavg()[0] ?? 0).toFixed(2) };
    console.log(`machine: ${machine.cores} cores, load average ${machine.loadavg1m} (1 min)`);
    const file = writeResult('scaleout', { patches, songs, duration, machine, latency: { direct, localBus, across }, rows, throughput });
    console.log(`wrote ${file}`);
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    await redis.teardown();
    rmSync(dir, { recursive: true, force: true });
  }
}

function ms(s: Summary) {
  return { p50_ms: +s.p50.toFixed(3), p95_ms: +s.p95.toFixed(3), p99_ms: +s.p99.toFixed(3) };
}

function ratio(a: number, b: number): number {
  return +(a / b).toFixed(2);
}
