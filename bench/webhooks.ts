/**
 * `npm run bench -- webhooks [--events 1000] [--endpoints 5] [--rounds 3] [--rate 200] [--paced 1000]`:
 * webhook delivery throughput and event-to-first-attempt latency on the embedded store, to a
 * local HTTPS receiver in a child process (its own core), beside a baseline of raw keep-alive
 * `https.request`s to the same receiver at the same concurrency (16), as ratios.
 *
 * - throughput: `rounds` rounds, each a baseline of `events × endpoints` requests then the
 *   engine with `events` events × `endpoints` endpoints enqueued at once (deliveries/s from the
 *   first enqueue to the last arrival: dispatch, store writes, signing and the send included).
 *   Rounds alternate so both sides see the same machine; medians are reported, and the ratio
 *   is the median of the per-round ratios. CPU ms of this process per 1000 requests is reported
 *   too: on a shared machine it moves far less than wall-clock throughput.
 * - latency: `paced` events at `rate` events/s; for each delivery, receiver arrival time minus
 *   the moment its event was written to the outbox (p50/p95/p99).
 * Targets: ≥ 2000 deliveries/s on 2 cores and ≥ 0.75× raw HTTPS; p99 ≤ 20 ms at 200 events/s.
 */
import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { EmbeddedStore } from '../store/index.ts';
import { createWebhooks, streamEndedEvent, webhookEventJob } from '../webhooks/index.ts';
import { printTable, progress, summarize, writeResult } from './lib.ts';

const RECEIVER = `
const https = require('node:https');
const fs = require('node:fs');
const arrivals = [];
const server = https.createServer({ key: fs.readFileSync(process.env.KEY), cert: fs.readFileSync(process.env.CERT) }, (req, res) => {
  req.resume();
  req.on('end', () => {
    arrivals.push([String(req.headers['reverie-webhook-id'] || ''), performance.timeOrigin + performance.now()]);
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
  });
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
process.on('message', (m) => {
  if (m === 'dump') { process.send({ arrivals: arrivals.splice(0) }); }
  if (m === 'exit') { server.close(); process.exit(0); }
});
`;

interface Receiver {
  proc: ChildProcess;
  port: number;
  dump(): Promise<[string, number][]>;
  count(): Promise<number>;
}

async function startReceiver(dir: string): Promise<Receiver> {
  const script = join(dir, 'receiver.cjs');
  writeFileSync(script, RECEIVER);
  const proc = fork(script, { env: { ...process.env, KEY: join(dir, 'srv.key'), CERT: join(dir, 'srv.crt') }, stdio: 'inherit' });
  const port = await new Promise<number>((resolve) => proc.once('message', (m: { port: number }) => resolve(m.port)));
  let pending: [string, number][] = [];
  const dump = () =>
    new Promise<[string, number][]>((resolve) => {
      proc.once('message', (m: { arrivals: [string, number][] }) => resolve(m.arrivals));
      proc.send('dump');
    });
  return {
    proc,
    port,
    async dump() {
      const out = pending.concat(await dump());
      pending = [];
      return out;
    },
    async count() {
      pending = pending.concat(await dump());
      return pending.length;
    },
  };
}

function makeTls(dir: string): string {
  const run = (...a: string[]) => execFileSync('openssl', a, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '1', '-subj', '/CN=bench CA');
  run('req', ...ec, '-keyout', 'srv.key', '-out', 'srv.csr', '-subj', '/CN=localhost');
  writeFileSync(join(dir, 'ext.cnf'), 'basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n');
  run('x509', '-req', '-in', 'srv.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'srv.crt', '-days', '1', '-extfile', 'ext.cnf');
  return readFileSync(join(dir, 'ca.crt'), 'utf8');
}

/** Baseline: n POSTs with a 400-byte body over a keep-alive agent, `concurrency` at a time. */
async function baseline(url: string, ca: string, n: number, concurrency: number): Promise<{ rps: number; latencies: number[]; cpuMsPerK: number }> {
  const agent = new https.Agent({ keepAlive: true, maxSockets: concurrency, ca });
  const body = JSON.stringify({ id: 'evt_baseline', pad: 'x'.repeat(360) });
  const latencies: number[] = [];
  let next = 0;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const t0 = performance.now();
      const req = https.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => {
          latencies.push(performance.now() - t0);
          resolve();
        });
      });
      req.on('error', reject);
      req.end(body);
    });
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < n) await one();
    }),
  );
  const rps = n / ((performance.now() - t0) / 1000);
  const cpuMsPerK = cpuMs(process.cpuUsage(cpu0)) / (n / 1000);
  agent.destroy();
  return { rps, latencies, cpuMsPerK };
}

function cpuMs(u: NodeJS.CpuUsage): number {
  return (u.user + u.system) / 1000;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

export default async function bench(args: Map<string, string>): Promise<void> {
  const events = Number(args.get('events') ?? 1000);
  const endpoints = Number(args.get('endpoints') ?? 5);
  const rate = Number(args.get('rate') ?? 200);
  const paced = Number(args.get('paced') ?? 1000);
  const rounds = Number(args.get('rounds') ?? 3);
  const concurrency = 16;

  const dir = mkdtempSync(join(tmpdir(), 'reverie-bench-wh-'));
  const ca = makeTls(dir);
  const receiver = await startReceiver(dir);
  const store = EmbeddedStore.open({ dataDir: join(dir, 'data') });
  const wh = createWebhooks({
    store,
    logger: pino({ level: 'error' }),
    allowLoopback: true,
    ca,
    engine: { concurrency },
  });
  try {
    const url = (p: string) => `https://127.0.0.1:${receiver.port}${p}`;
    for (let i = 0; i < endpoints; i++) await wh.service.create('acc_bench', { url: url(`/e${i}`), events: ['stream.ended'] });
    const emit = async () => {
      const event = streamEndedEvent({
        id: 'str_bench',
        pipeline: 'streamdiffusion',
        createdAt: new Date().toISOString(),
        startedAt: new Date().toISOString(),
        endedAt: new Date().toISOString(),
        endReason: 'timeout',
        gatewayHost: 'gw.bench',
      });
      const at = performance.timeOrigin + performance.now();
      await store.queue.enqueue(webhookEventJob(event, 'acc_bench'));
      return { id: event.id, at };
    };
    const waitArrivals = async (n: number, bar?: ReturnType<typeof progress>) => {
      let seen = 0;
      while (seen < n) {
        await new Promise((r) => setTimeout(r, 50));
        const c = await receiver.count();
        bar?.tick(c - seen);
        seen = c;
      }
    };

    await wh.engine.start();

    // Warm-up: both paths, so TLS sessions, JIT and SQLite caches are hot.
    await baseline(url('/warm'), ca, 500, concurrency);
    for (let i = 0; i < 100; i++) await emit();
    await waitArrivals(100 * endpoints);
    await receiver.dump();

    // Throughput: baseline and engine alternately, `rounds` times.
    const total = events * endpoints;
    const perRound: { base: number; engine: number; baseCpu: number; engineCpu: number }[] = [];
    const baseLatencies: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const base = await baseline(url('/base'), ca, total, concurrency);
      baseLatencies.push(...base.latencies);
      await receiver.dump();

      const bar = progress(`round ${r + 1}/${rounds} deliveries`, total);
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      for (let i = 0; i < events; i++) await emit();
      await waitArrivals(total, bar);
      const engineSeconds = (performance.now() - t0) / 1000;
      const engineCpu = cpuMs(process.cpuUsage(cpu0)) / (total / 1000);
      bar.done();
      await receiver.dump();
      perRound.push({ base: base.rps, engine: total / engineSeconds, baseCpu: base.cpuMsPerK, engineCpu });
    }
    const engineRps = median(perRound.map((p) => p.engine));
    const baseRps = median(perRound.map((p) => p.base));
    const ratio = median(perRound.map((p) => p.engine / p.base));
    const cpuRatio = median(perRound.map((p) => p.engineCpu / p.baseCpu));

    // Latency: paced events, event written → first attempt arrives.
    const emitted = new Map<string, number>();
    for (let i = 0; i < paced; i++) {
      const e = await emit();
      emitted.set(e.id, e.at);
      await new Promise((r) => setTimeout(r, 1000 / rate));
    }
    await waitArrivals(paced * endpoints);
    const latencies = (await receiver.dump()).map(([id, at]) => at - (emitted.get(id) ?? Number.NaN)).filter(Number.isFinite);
    const lat = summarize(latencies);
    const baseLat = summarize(baseLatencies);

    const rows = [
      ...perRound.map((p, i) => ({
        case: `round ${i + 1}: raw https.request / engine (${events} events × ${endpoints} endpoints)`,
        'raw req/s': p.base,
        'engine deliveries/s': p.engine,
        ratio: p.engine / p.base,
        'raw CPU ms/1000': p.baseCpu,
        'engine CPU ms/1000': p.engineCpu,
      })),
      { case: 'median', 'raw req/s': baseRps, 'engine deliveries/s': engineRps, ratio, 'raw CPU ms/1000': median(perRound.map((p) => p.baseCpu)), 'engine CPU ms/1000': median(perRound.map((p) => p.engineCpu)) },
    ];
    printTable('webhook delivery throughput (embedded store, local HTTPS receiver, 16 in flight)', rows);
    printTable('latency', [
      { case: 'raw https.request round trip (all rounds)', p50_ms: baseLat.p50, p95_ms: baseLat.p95, p99_ms: baseLat.p99 },
      { case: `engine paced ${rate} ev/s × ${endpoints}: event → first attempt`, p50_ms: lat.p50, p95_ms: lat.p95, p99_ms: lat.p99 },
    ]);
    console.log(`\nengine / raw throughput (median of rounds): ${ratio.toFixed(3)}   CPU per delivery / CPU per raw request: ${cpuRatio.toFixed(2)}`);
    console.log(
      `targets: ≥ 2000 deliveries/s (${engineRps >= 2000 ? 'met' : 'MISSED'}), ≥ 0.75× raw (${ratio >= 0.75 ? 'met' : 'MISSED'}), p99 ≤ 20 ms at 200 ev/s (${lat.p99 <= 20 ? 'met' : 'MISSED'})`,
    );
    const path = writeResult('webhooks', {
      params: { events, endpoints, rate, paced, concurrency, rounds },
      rounds: perRound,
      baseline: { rps: baseRps, latencyMs: baseLat },
      engine: { deliveriesPerSecond: engineRps, eventToFirstAttemptMs: lat },
      ratio: { throughput: ratio, cpuPerRequest: cpuRatio },
      targets: { deliveriesPerSecond: 2000, ratio: 0.75, p99Ms: 20 },
    });
    console.log(`result: ${path}`);
  } finally {
    await wh.close();
    await store.close();
    receiver.proc.send('exit');
    rmSync(dir, { recursive: true, force: true });
  }
}
