/**
 * Shared benchmark helpers: percentiles, a table printer, a progress bar on stderr and the JSON
 * result writer. Every benchmark reports its path beside a baseline measured in the same run,
 * because our machines are shared and noisy: absolute numbers drift, ratios hold.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const RESULTS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'results');

/** Linear-interpolated percentile (p in 0–100) of unsorted samples. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  const a = sorted[lo] as number;
  const b = sorted[hi] as number;
  return a + (b - a) * (rank - lo);
}

export interface Summary {
  n: number;
  mean: number;
  p50: number;
  p95: number;
  p99: number;
  min: number;
  max: number;
}

export function summarize(samples: readonly number[]): Summary {
  const n = samples.length;
  const mean = n === 0 ? Number.NaN : samples.reduce((s, x) => s + x, 0) / n;
  return {
    n,
    mean,
    p50: percentile(samples, 50),
    p95: percentile(samples, 95),
    p99: percentile(samples, 99),
    // A loop, not Math.min(...samples): a long run's latencies (≈ 120 k and up) overflow the stack as arguments.
    min: n === 0 ? Number.NaN : samples.reduce((m, x) => (x < m ? x : m), Infinity),
    max: n === 0 ? Number.NaN : samples.reduce((m, x) => (x > m ? x : m), -Infinity),
  };
}

export type Row = Record<string, string | number | boolean | null>;

function fmt(v: Row[string]): string {
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return String(v);
    if (Number.isInteger(v)) return String(v);
    return Math.abs(v) >= 100 ? v.toFixed(1) : v.toFixed(3);
  }
  return String(v);
}

/** Prints rows as an aligned text table on stdout. */
export function printTable(title: string, rows: Row[]): void {
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cells = rows.map((r) => cols.map((c) => fmt(r[c] ?? '')));
  const widths = cols.map((c, i) => Math.max(c.length, ...cells.map((row) => (row[i] ?? '').length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(widths[i] ?? 0)).join('  ');
  console.log(`\n${title}`);
  console.log(line(cols));
  console.log(line(widths.map((w) => '-'.repeat(w))));
  for (const row of cells) console.log(line(row));
}

/** Writes `bench/results/<name>-<timestamp>.json` and `<name>-latest.json`; returns the path. */
export function writeResult(name: string, result: unknown): string {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const body = JSON.stringify({ name, at: new Date().toISOString(), host: hostInfo(), result }, null, 2);
  const path = join(RESULTS_DIR, `${name}-${stamp}.json`);
  writeFileSync(path, body);
  writeFileSync(join(RESULTS_DIR, `${name}-latest.json`), body);
  return path;
}

function hostInfo() {
  return { node: process.version, platform: process.platform, arch: process.arch };
}

/** A progress bar on stderr (stdout stays a clean table). `tick()` advances; `done()` ends the line. */
export function progress(label: string, total: number) {
  let n = 0;
  const draw = () => {
    const width = 30;
    const filled = Math.round((n / Math.max(total, 1)) * width);
    process.stderr.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${n}/${total}`);
  };
  draw();
  return {
    tick(k = 1) {
      n = Math.min(total, n + k);
      draw();
    },
    done() {
      n = total;
      draw();
      process.stderr.write('\n');
    },
  };
}

/** Parses `--name value` / `--flag` arguments into a map. */
export function parseArgs(argv: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (!a.startsWith('--')) continue;
    const eq = a.indexOf('=');
    if (eq > 0) out.set(a.slice(2, eq), a.slice(eq + 1));
    else if (i + 1 < argv.length && !(argv[i + 1] as string).startsWith('--')) out.set(a.slice(2), argv[++i] as string);
    else out.set(a.slice(2), 'true');
  }
  return out;
}

/** The parts of a V8 CPU profile (`Profiler.stop`) that `profileShares` reads. */
export interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string }; children?: number[] }[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * Busy time of a CPU profile by category: each sample's time goes to the nearest frame, from the
 * sampled one up its callers, for which `classify` names a category (null: look at the caller).
 * Idle and what `classify` calls `leftOut` (the profiler's own frames) are left out; what no frame
 * names is 'other'. Shares of 1.
 */
export function profileShares(profile: CpuProfile, classify: (frame: { functionName: string; url: string }) => string | null, leftOut?: string): Map<string, number> {
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const category = new Map<number, string | null>();
  const categoryOf = (id: number): string | null => {
    if (category.has(id)) return category.get(id)!;
    const node = byId.get(id);
    if (!node) return 'other';
    const name = node.callFrame.functionName;
    let c: string | null;
    if (name === '(idle)') c = null;
    else c = classify(node.callFrame) ?? (parent.has(id) ? categoryOf(parent.get(id)!) : 'other');
    category.set(id, c);
    return c;
  };
  const time = new Map<string, number>();
  let busy = 0;
  for (const [i, id] of profile.samples.entries()) {
    const c = categoryOf(id);
    const dt = profile.timeDeltas[i] ?? 0;
    if (c === null || c === leftOut) continue;
    time.set(c, (time.get(c) ?? 0) + dt);
    busy += dt;
  }
  return new Map([...time].sort((a, b) => b[1] - a[1]).map(([c, t]) => [c, busy > 0 ? t / busy : 0]));
}

/**
 * `n` busy loops, each in its own process (a stand-in for noisy neighbours: one keeps one core
 * busy), bounded to `maxMs` in case the bench dies without stopping them. Returns the stop.
 */
export function busyLoops(n: number, maxMs = 3_600_000): () => void {
  const code = `const end = Date.now() + ${Math.round(maxMs)}; while (Date.now() < end);`;
  const loops = Array.from({ length: n }, () => spawn(process.execPath, ['-e', code], { stdio: 'ignore' }));
  return () => {
    for (const l of loops) l.kill('SIGKILL');
  };
}

/**
 * CPU seconds of process `pid` from /proc/<pid>/stat (utime + stime; with `waited`, also what its
 * exited children that it waited for used: cutime + cstime). Linux clock ticks, 100 a second.
 */
export function procCpuSeconds(pid: number | 'self', waited = false): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after "(comm) ": state, ppid, …; utime, stime, cutime, cstime are fields 14–17 of proc(5).
  const f = stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
  return (Number(f[11]) + Number(f[12]) + (waited ? Number(f[13]) + Number(f[14]) : 0)) / 100;
}

/**
 * CPU seconds of this process (all its threads) and of its children with what they waited for
 * (e.g. the render threads' encoder hosts and the LAME processes those ran), from /proc. Linux only;
 * elsewhere this process alone.
 */
export function treeCpuSeconds(): number {
  const u = process.cpuUsage();
  let children = 0;
  try {
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      let stat: string;
      try {
        stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      } catch {
        continue; // gone since the listing
      }
      if (Number(stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[1]) !== process.pid) continue;
      try {
        children += procCpuSeconds(Number(name), true);
      } catch {
        // gone since
      }
    }
    children += procCpuSeconds('self', true) - procCpuSeconds('self'); // children that exited and were waited for
  } catch {
    // not Linux
  }
  return (u.user + u.system) / 1e6 + children;
}
