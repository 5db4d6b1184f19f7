/**
 * Start-up of `reverie serve`, built (dist/, plain JavaScript: what `npm start`, `./reverie up` and
 * the images run) against the sources through tsx (`node --import tsx control/main.ts`, what
 * production ran before the build step), side by side in one run, interleaved so drifting load on
 * a shared machine hits both alike. Every role on the embedded store, as the default start.
 *
 * Per start: milliseconds from spawn to the first 200 of /readyz; then, after a rest (the render
 * thread the worker role prewarms has loaded by then), the process's RSS (/proc/<pid>/status,
 * VmRSS: the main process with its threads; the MP3 encoder helper each render thread forks is a
 * separate process, the same in both modes, not counted) and the CPU it has used so far (user +
 * system, every thread). Each mode keeps one data folder: a first start per mode (writes the demo
 * models and the first key) is a warm-up and not counted.
 *
 *   npm run bench -- startup [--runs 5] [--rest-ms 3000]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildState, build, DEFAULT_OUT, ROOT } from '../bin/build.js';
import { freePort } from '../test/helpers/net.ts';
import { printTable, procCpuSeconds, progress, summarize, writeResult, type Row } from './lib.ts';

type Mode = 'tsx' | 'built';

interface Sample {
  readyMs: number;
  rssMiB: number;
  cpuS: number;
}


function argv(mode: Mode): string[] {
  return mode === 'built' ? [join(DEFAULT_OUT, 'control/main.js'), 'serve'] : ['--import', 'tsx', join(ROOT, 'control/main.ts'), 'serve'];
}

function rssMiB(pid: number): number {
  const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? Number.NaN);
  return kb / 1024;
}


async function start(mode: Mode, dataDir: string, restMs: number): Promise<Sample> {
  const port = await freePort();
  const t0 = performance.now();
  const child = spawn(process.execPath, argv(mode), {
    cwd: ROOT,
    env: { ...process.env, NODE_OPTIONS: '', MALLOC_ARENA_MAX: '2', PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  const exited = once(child, 'exit');
  try {
    // Poll /readyz every 10 ms for at most 120 s (the resolution of the start-up time).
    let readyMs = Number.NaN;
    for (let i = 0; i < 12_000 && child.exitCode === null; i++) {
      const ok = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2000) }).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) {
        readyMs = performance.now() - t0;
        break;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    if (!Number.isFinite(readyMs)) throw new Error(`${mode}: not ready (exit ${child.exitCode}): ${err}`);
    // The rest is the measurement's definition ("at rest"), not a wait for a condition.
    await new Promise((r) => setTimeout(r, restMs));
    const pid = child.pid as number;
    return { readyMs, rssMiB: rssMiB(pid), cpuS: procCpuSeconds(pid) };
  } finally {
    if (child.exitCode === null) child.kill('SIGTERM');
    await exited;
  }
}

export default async function startup(args: Map<string, string>): Promise<void> {
  const runs = Math.max(1, Number(args.get('runs') ?? 5));
  const restMs = Number(args.get('rest-ms') ?? 3000);
  const state = buildState();
  if (!state.current) await build();
  const modes: Mode[] = ['tsx', 'built'];
  const dirs = Object.fromEntries(modes.map((m) => [m, mkdtempSync(join(tmpdir(), `rv-bench-startup-${m}-`))])) as Record<Mode, string>;
  const samples: Record<Mode, Sample[]> = { tsx: [], built: [] };
  const bar = progress('startup', (runs + 1) * modes.length);
  try {
    for (const m of modes) {
      await start(m, dirs[m], restMs); // warm-up: first start writes the demo models and the key
      bar.tick();
    }
    for (let i = 0; i < runs; i++) {
      for (const m of i % 2 === 0 ? modes : [...modes].reverse()) {
        samples[m].push(await start(m, dirs[m], restMs));
        bar.tick();
      }
    }
  } finally {
    bar.done();
    for (const d of Object.values(dirs)) rmSync(d, { recursive: true, force: true });
  }
  const stats = Object.fromEntries(
    modes.map((m) => [m, { ready: summarize(samples[m].map((s) => s.readyMs)), rss: summarize(samples[m].map((s) => s.rssMiB)), cpu: summarize(samples[m].map((s) => s.cpuS)) }]),
  ) as Record<Mode, { ready: ReturnType<typeof summarize>; rss: ReturnType<typeof summarize>; cpu: ReturnType<typeof summarize> }>;
  const rows: Row[] = modes.map((m) => ({
    mode: m === 'tsx' ? 'sources via tsx (before)' : 'built dist/ (after)',
    runs,
    'ready p50 (ms)': Math.round(stats[m].ready.p50),
    'ready p95 (ms)': Math.round(stats[m].ready.p95),
    'RSS at rest p50 (MiB)': +stats[m].rss.p50.toFixed(1),
    'RSS at rest p95 (MiB)': +stats[m].rss.p95.toFixed(1),
    'CPU to rest p50 (s)': +stats[m].cpu.p50.toFixed(2),
  }));
  const ratio = (k: 'ready' | 'rss' | 'cpu') => +(stats.built[k].p50 / stats.tsx[k].p50).toFixed(2);
  rows.push({ mode: 'built / tsx (p50)', runs, 'ready p50 (ms)': ratio('ready'), 'ready p95 (ms)': '', 'RSS at rest p50 (MiB)': ratio('rss'), 'RSS at rest p95 (MiB)': '', 'CPU to rest p50 (s)': ratio('cpu') });
  printTable(`reverie serve start-up: /readyz, then ${restMs} ms at rest (every role, embedded store)`, rows);
  const path = writeResult('startup', { runs, restMs, samples, stats, ratios: { ready: ratio('ready'), rss: ratio('rss'), cpu: ratio('cpu') } });
  console.log(`\n${path}`);
}
