/**
 * Soak: everything at once for a long time against one `reverie serve` process, watching for
 * leaks (`npm run bench -- soak -- --minutes 30`).
 *
 * Load, all the time: publishers joining and leaving (OBS-like, 512² H.264, processors only),
 * WHEP viewers joining and leaving, PATCH bursts, song renders, and webhook deliveries to a
 * local HTTPS receiver (every stream start and end is an event). Every 10 s it samples the
 * server's RSS, open file descriptors and threads (/proc) and its V8 heap and event-loop delay
 * (/metrics). Verdict: RSS at rest (every session gone, see rest()) grows < 10 % between
 * minute 5 (warm) and the end, fds and threads flat. RSS under load is printed too, but one
 * minute of churn swings it ±25 % with the sessions in flight.
 *
 *   --minutes 30     run length (≥ 6 for a verdict; shorter runs print the samples only)
 *   --streams 4      publishers live at once (each one replaced every ≈ 40 s)
 *   --viewers 6      WHEP viewers at once (each one replaced every ≈ 20 s)
 *   --diffusion 0.5  share of streams that run the (demo) diffusion pipeline; the rest skip it
 *   --songs 45       seconds between song requests (0: no songs)
 *   --heap-snapshot  at the end, at rest: force two full collections in the server (through its
 *                    inspector) and write a heap snapshot of its main thread to the temp dir; the
 *                    RSS after the collections tells garbage V8 had not collected yet from memory
 *                    something still reaches, and the snapshot's retainers name that something
 *                    (Chrome DevTools, Memory tab, "Load")
 * The two before it take parts out of the mix, to find which one a growth belongs to.
 */
import { readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectWebSocket } from '../control/WebSockets.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { freePort } from '../test/helpers/net.ts';
import { ObsPublishers } from '../test/helpers/obsPublisher.ts';
import { startServerProcess } from '../test/helpers/serverProcess.ts';
import { makeTls, TestReceiver } from '../test/webhooks/helpers.ts';
import { printTable, procCpuSeconds, progress, writeResult, type Row } from './lib.ts';

/** The process once every stream and session is gone (see rest()). */
interface Rest {
  minute: number;
  rssMiB: number;
  fds: number;
  threads: number;
  /** Streams the node still held when sampled (0 unless it failed to release them in 60 s). */
  streamsHeld: number;
  memKinds: Record<string, number>;
  /**
   * MiB the node's memory trims gave back while everything stopped (after the closes): about what
   * would still be resident without them (media/gst/MemoryTrim.ts).
   */
  trimmedMiB: number;
  /** MiB all its trims gave back since it started. */
  trimmedTotalMiB: number;
  /** The main thread's V8 heap (committed, used) and memory held outside it by JS objects (ArrayBuffers, …), MiB. */
  v8: { heapTotalMiB: number; heapUsedMiB: number; externalMiB: number };
}

interface Sample {
  minute: number;
  rssMiB: number;
  heapUsedMiB: number;
  fds: number;
  threads: number;
  loopP99Ms: number;
  /** Server CPU, cores, over the 10 s before the sample. */
  cores: number;
  streams: number;
  viewers: number;
  fdKinds: Record<string, number>;
  /** Resident MiB by kind of mapping (see memKinds). */
  memKinds: Record<string, number>;
}

function proc(pid: number): { rssMiB: number; threads: number; fds: number; fdKinds: Record<string, number> } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
  // What the descriptors are (socket, pipe, eventfd, …): a leak shows which kind grows.
  const fdKinds: Record<string, number> = {};
  const fds = readdirSync(`/proc/${pid}/fd`);
  for (const fd of fds) {
    let target = 'gone';
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      // closed between readdir and readlink
    }
    const kind = target.startsWith('/') ? 'file' : target.replace(/:\[?\d+\]?$/, '').replace(/^anon_inode:/, '');
    fdKinds[kind] = (fdKinds[kind] ?? 0) + 1;
  }
  return { rssMiB: kb('VmRSS') / 1024, threads: kb('Threads'), fds: fds.length, fdKinds };
}

/**
 * Resident memory by kind of mapping, MiB, from /proc/<pid>/smaps: which allocator holds a
 * growth. `malloc-main` is glibc's brk heap, `malloc-arenas` its 64 MiB thread arenas (both grow
 * with fragmentation of small allocations); `anon` is every other anonymous mapping (V8 heaps of
 * every thread, ArrayBuffers, and any allocation ≥ the 128 KiB mmap threshold: live large data);
 * `files` are mapped files (libraries, models); `stacks` thread stacks.
 */
function memKinds(pid: number): Record<string, number> {
  const kinds: Record<string, number> = {};
  let kind = 'anon';
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const path = head[3] ?? '';
      const start = parseInt(head[1] as string, 16);
      const sizeMiB = (parseInt(head[2] as string, 16) - start) / 2 ** 20;
      if (path === '[heap]') kind = 'malloc-main';
      else if (path.startsWith('[stack')) kind = 'stacks';
      else if (path.startsWith('/')) kind = 'files';
      // glibc's other arenas: heaps of 64 MiB mapped at 64 MiB-aligned addresses (the part in use
      // is one mapping from the aligned start, the rest a PROT_NONE one after it).
      else if (path === '' && start % 2 ** 26 === 0 && sizeMiB <= 64) kind = 'malloc-arenas';
      else kind = path === '' ? 'anon' : 'other';
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) kinds[kind] = (kinds[kind] ?? 0) + Number(rss[1]) / 1024;
  }
  return kinds;
}

/** utime + stime of the process, seconds. */

/**
 * Opens the inspector of process `pid` (SIGUSR1, on the `--inspect-port` it was started with),
 * forces two full collections, then writes a heap snapshot to `file`. Returns the RSS after the
 * collections, MiB. Bounded: 10 s to find the inspector, 120 s for the snapshot.
 */
async function collectAndSnapshot(pid: number, port: number, file: string): Promise<number> {
  process.kill(pid, 'SIGUSR1');
  let url = '';
  for (const until = Date.now() + 10_000; !url && Date.now() < until; ) {
    const list = await fetch(`http://127.0.0.1:${port}/json/list`).then((r) => r.json() as Promise<{ webSocketDebuggerUrl?: string }[]>).catch(() => []);
    url = list[0]?.webSocketDebuggerUrl ?? '';
    if (!url) await new Promise((r) => setTimeout(r, 200));
  }
  if (!url) throw new Error(`no inspector on port ${port}`);
  const ws = connectWebSocket(url);
  await new Promise<void>((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const chunks: string[] = [];
  const pending = new Map<number, () => void>();
  ws.on('message', (data) => {
    const m = JSON.parse(data.toString()) as { id?: number; method?: string; params?: { chunk?: string } };
    if (m.method === 'HeapProfiler.addHeapSnapshotChunk') chunks.push(m.params?.chunk ?? '');
    if (m.id !== undefined) pending.get(m.id)?.();
  });
  let seq = 0;
  const call = (method: string, params: object = {}) =>
    new Promise<void>((resolve, reject) => {
      const id = ++seq;
      const timer = setTimeout(() => reject(new Error(`${method}: no reply in 120 s`)), 120_000);
      pending.set(id, () => (clearTimeout(timer), resolve()));
      ws.send(JSON.stringify({ id, method, params }));
    });
  try {
    await call('HeapProfiler.enable');
    await call('HeapProfiler.collectGarbage');
    await call('HeapProfiler.collectGarbage');
    const rssMiB = proc(pid).rssMiB;
    await call('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    writeFileSync(file, chunks.join(''));
    return rssMiB;
  } finally {
    ws.close();
  }
}

function metric(text: string, name: string): number {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm').exec(text);
  return m ? Number(m[1]) : Number.NaN;
}

export default async function soak(args: Map<string, string>): Promise<void> {
  const minutes = Number(args.get('minutes') ?? 30);
  const streamsAtOnce = Number(args.get('streams') ?? 4);
  const viewersAtOnce = Number(args.get('viewers') ?? 6);
  const diffusionShare = Number(args.get('diffusion') ?? 0.5);
  const songEveryS = Number(args.get('songs') ?? 45);
  const snapshot = args.has('heap-snapshot');
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) };
  const samples: Sample[] = [];
  const failures: string[] = [];
  const counts = { published: 0, unpublished: 0, played: 0, patches: 0, patchErrors: 0, songs: 0, failures: 0 };
  try {
    const tls = makeTls();
    const caFile = join(tls.dir, 'ca.pem');
    writeFileSync(caFile, tls.ca);
    t.teardown(() => tls.cleanup());
    const receiver = await TestReceiver.start(tls);
    t.teardown(() => receiver.close());
    const port = await freePort();
    const inspectPort = await freePort();
    const server = await startServerProcess(t, {
      // The inspector opens only when asked (SIGUSR1), on this port.
      ...(snapshot ? { nodeArgs: [`--inspect-port=127.0.0.1:${inspectPort}`] } : {}),
      // MALLOC_ARENA_MAX as our launchers set it (docs/operations.md "Memory"); yours wins.
      env: { PORT: String(port), HOST: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1', ALLOW_LOOPBACK_TARGETS: '1', EXTRA_CA_FILE: caFile, LOG_LEVEL: 'warn', MALLOC_ARENA_MAX: process.env['MALLOC_ARENA_MAX'] ?? '2' },
    });
    const pid = server.child.pid as number;
    const hook = await server.api('POST', '/v1/webhooks', { url: receiver.url('/hook'), events: ['stream.started', 'stream.ended'] });
    if (hook.status !== 201) throw new Error(`webhook → ${hook.status}`);
    const pubs = new ObsPublishers();
    t.teardown(() => pubs.close());
    const source = await stampedH264({ size: 512, frames: 300 });

    type Live = { id: string; publisher: string; playback: string; until: number };
    const live: Live[] = [];
    const viewers: { id: string; until: number }[] = [];
    let seq = 0;
    const addStream = async () => {
      const i = seq++;
      const r = await server.api('POST', '/v1/streams', { params: { prompt: `soak ${i}`, skip_diffusion: (i * diffusionShare) % 1 >= diffusionShare, width: 512, height: 512 } });
      if (r.status !== 201) return void counts.failures++;
      const s = r.body as { id: string; whip_url: string; stream_key: string; output_stream_url: string };
      const p = await pubs.publish({ url: s.whip_url, token: s.stream_key, source, httpFrom: `127.0.2.${(i % 250) + 1}` }).catch((err: unknown) => ({ id: '', status: 0, body: String(err) }));
      if (p.status !== 201) {
        failures.push(`WHIP → ${p.status}: ${p.body.slice(0, 400)}`);
        await server.api('DELETE', `/v1/streams/${s.id}`);
        return void counts.failures++;
      }
      counts.published++;
      live.push({ id: s.id, publisher: p.id, playback: s.output_stream_url, until: Date.now() + 30_000 + Math.random() * 20_000 });
    };
    const dropStream = async (s: Live) => {
      live.splice(live.indexOf(s), 1);
      await pubs.stop(s.publisher).catch(() => undefined);
      await server.api('DELETE', `/v1/streams/${s.id}`);
      counts.unpublished++;
    };

    // At rest: every publisher and viewer gone and the node holding no stream. Under churn one
    // sample mostly measures sessions being set up or torn down (RSS moved ±25 % from minute to
    // minute with the thread count); what is still resident once everything is gone is what a
    // leak keeps. The lowest of 10 one-second samples, after the node reports no stream.
    const trimmed = async () => metric(await (await fetch(`${server.url}/metrics`)).text(), 'reverie_media_memory_trim_released_bytes_total') / 2 ** 20;
    const rest = async (): Promise<Rest> => {
      const trimmedBefore = await trimmed();
      for (const s of [...live]) await dropStream(s);
      for (const v of viewers.splice(0)) await pubs.stop(v.id).catch(() => undefined);
      let held = Number.NaN;
      for (const until = Date.now() + 60_000; Date.now() < until; ) {
        held = metric(await (await fetch(`${server.url}/metrics`)).text(), 'reverie_media_streams');
        if (held === 0) break;
        await new Promise((r) => setTimeout(r, 500));
      }
      let best: Rest | null = null;
      for (let i = 0; i < 10; i++) {
        await new Promise((r) => setTimeout(r, 1000));
        const p = proc(pid);
        if (!best || p.rssMiB < best.rssMiB) best = { minute: (Date.now() - start) / 60_000, rssMiB: p.rssMiB, fds: p.fds, threads: p.threads, streamsHeld: held, memKinds: memKinds(pid), trimmedMiB: 0, trimmedTotalMiB: 0, v8: { heapTotalMiB: 0, heapUsedMiB: 0, externalMiB: 0 } };
      }
      const total = await trimmed();
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const mib = (name: string) => metric(text, name) / 2 ** 20;
      const v8 = { heapTotalMiB: mib('reverie_nodejs_heap_size_total_bytes'), heapUsedMiB: mib('reverie_nodejs_heap_size_used_bytes'), externalMiB: mib('reverie_nodejs_external_memory_bytes') };
      return { ...(best as Rest), trimmedMiB: total - trimmedBefore, trimmedTotalMiB: total, v8 };
    };
    let restWarm: Rest | null = null;

    const start = Date.now();
    const end = start + minutes * 60_000;
    const bar = progress('soak minutes', minutes);
    let lastBar = 0;
    let nextSample = start;
    let cpuAt = { s: procCpuSeconds(pid), t: performance.now() };
    let nextSong = start;
    let nextPatch = start;
    while (Date.now() < end) {
      const now = Date.now();
      for (const s of live.filter((x) => x.until < now)) await dropStream(s);
      while (live.length < streamsAtOnce) await addStream();
      for (const v of viewers.filter((x) => x.until < now)) {
        viewers.splice(viewers.indexOf(v), 1);
        await pubs.stop(v.id).catch(() => undefined);
      }
      while (viewers.length < viewersAtOnce && live.length > 0) {
        const target = live[Math.floor(Math.random() * live.length)] as Live;
        const v = await pubs.play({ url: target.playback, httpFrom: `127.0.3.${(counts.played % 250) + 1}` }).catch((err: unknown) => ({ id: '', status: 0, body: String(err) }));
        counts.played++;
        if (v.status !== 201) {
          counts.failures++;
          failures.push(`WHEP → ${v.status}: ${v.body.slice(0, 400)}`);
          if (v.id) await pubs.stop(v.id).catch(() => undefined);
          break;
        }
        viewers.push({ id: v.id, until: Date.now() + 10_000 + Math.random() * 20_000 });
      }
      if (now >= nextPatch) {
        // A burst: 20 prompt changes to one stream as fast as the API takes them.
        const target = live[Math.floor(Math.random() * live.length)];
        if (target) {
          for (let k = 0; k < 20; k++) {
            const r = await server.api('PATCH', `/v1/streams/${target.id}`, { params: { prompt: `soak burst ${k}`, image_postprocessing: k % 5 === 0 ? { processors: [{ type: 'sharpen' }] } : { processors: [] } } });
            counts.patches++;
            if (r.status !== 200) counts.patchErrors++;
          }
        }
        nextPatch = now + 15_000;
      }
      if (songEveryS > 0 && now >= nextSong) {
        const r = await server.api('POST', '/music/v1/songs', { prompt: 'soak lo-fi beat', duration: 20, variations: 1 });
        if (r.status === 200 || r.status === 201 || r.status === 202) counts.songs++;
        nextSong = now + songEveryS * 1000;
      }
      if (now >= nextSample) {
        const p = proc(pid);
        const text = await (await fetch(`${server.url}/metrics`)).text();
        const heap = metric(text, 'reverie_nodejs_heap_size_used_bytes') / 2 ** 20;
        const loop = metric(text, 'reverie_nodejs_eventloop_lag_p99_seconds') * 1000;
        const cpu = { s: procCpuSeconds(pid), t: performance.now() };
        const cores = (cpu.s - cpuAt.s) / ((cpu.t - cpuAt.t) / 1000);
        cpuAt = cpu;
        samples.push({ minute: (now - start) / 60_000, rssMiB: p.rssMiB, heapUsedMiB: heap, fds: p.fds, threads: p.threads, loopP99Ms: loop, cores, streams: live.length, viewers: viewers.length, fdKinds: p.fdKinds, memKinds: memKinds(pid) });
        nextSample = now + 10_000;
      }
      if (!restWarm && minutes >= 6 && now - start >= 5 * 60_000) restWarm = await rest();
      const done = Math.floor((Date.now() - start) / 60_000);
      if (done > lastBar) {
        bar.tick(done - lastBar);
        lastBar = done;
      }
      await new Promise((r) => setTimeout(r, 500)); // the driver's tick
    }
    bar.done();
    const restEnd = minutes >= 6 || snapshot ? await rest() : null;
    const heap = snapshot && restEnd ? { file: join(tmpdir(), `soak-${Date.now()}.heapsnapshot`), rssMiB: 0 } : null;
    if (heap) heap.rssMiB = await collectAndSnapshot(pid, inspectPort, heap.file);

    // One row per minute (the last sample of each).
    const perMinute = new Map<number, Sample>();
    for (const s of samples) perMinute.set(Math.floor(s.minute), s);
    const rows: Row[] = [...perMinute.entries()].map(([m, s]) => ({
      minute: m,
      'RSS MiB': s.rssMiB,
      'heap MiB': s.heapUsedMiB,
      fds: s.fds,
      threads: s.threads,
      'loop p99 ms': s.loopP99Ms,
      cores: s.cores,
      streams: s.streams,
      viewers: s.viewers,
    }));
    printTable('soak: one reverie serve process under mixed load (last sample of each minute)', rows);

    const at = (minute: number) => samples.filter((s) => s.minute >= minute && s.minute < minute + 1);
    const avg = (xs: Sample[], k: keyof Sample) => xs.reduce((n, s) => n + (s[k] as number), 0) / Math.max(1, xs.length);
    const warm = at(5);
    const last = at(minutes - 1);
    const verdict =
      minutes >= 6 && warm.length && last.length
        ? {
            rssGrowth: avg(last, 'rssMiB') / avg(warm, 'rssMiB') - 1,
            fdsWarm: avg(warm, 'fds'),
            fdsEnd: avg(last, 'fds'),
            threadsWarm: avg(warm, 'threads'),
            threadsEnd: avg(last, 'threads'),
          }
        : null;
    const summary: Row[] = [
      { measure: 'publishers started / stopped', value: `${counts.published} / ${counts.unpublished}` },
      { measure: 'WHEP viewers started', value: counts.played },
      { measure: 'PATCHes (non-200)', value: `${counts.patches} (${counts.patchErrors})` },
      { measure: 'songs requested', value: counts.songs },
      { measure: 'webhook deliveries received', value: receiver.requests.length },
      { measure: 'failed creates/publishes', value: counts.failures },
    ];
    if (restWarm && restEnd) {
      const kinds = [...new Set([...Object.keys(restWarm.memKinds), ...Object.keys(restEnd.memKinds)])];
      summary.push(
        { measure: `RSS at rest, minute ${restWarm.minute.toFixed(1)} → ${restEnd.minute.toFixed(1)} (target < 10 %)`, value: `${restWarm.rssMiB.toFixed(0)} → ${restEnd.rssMiB.toFixed(0)} MiB (${((restEnd.rssMiB / restWarm.rssMiB - 1) * 100).toFixed(1)} %)` },
        { measure: 'at rest: open fds, threads, streams held', value: `${restWarm.fds} → ${restEnd.fds}, ${restWarm.threads} → ${restEnd.threads}, ${restWarm.streamsHeld} → ${restEnd.streamsHeld}` },
        { measure: 'at rest: resident MiB by kind', value: kinds.map((k) => `${k} ${(restWarm.memKinds[k] ?? 0).toFixed(0)}→${(restEnd.memKinds[k] ?? 0).toFixed(0)}`).join(', ') },
        { measure: 'at rest: main thread V8 heap committed / used, external MiB', value: `${restWarm.v8.heapTotalMiB.toFixed(0)} / ${restWarm.v8.heapUsedMiB.toFixed(0)}, ${restWarm.v8.externalMiB.toFixed(0)} → ${restEnd.v8.heapTotalMiB.toFixed(0)} / ${restEnd.v8.heapUsedMiB.toFixed(0)}, ${restEnd.v8.externalMiB.toFixed(0)}` },
        { measure: 'at rest: MiB the trims gave back after the closes (≈ what would stay resident without them)', value: `${restWarm.trimmedMiB.toFixed(0)} → ${restEnd.trimmedMiB.toFixed(0)} (${restEnd.trimmedTotalMiB.toFixed(0)} in all)` },
      );
    }
    if (verdict) {
      summary.push(
        { measure: `RSS under load, minute 5 → ${minutes - 1}`, value: `${(verdict.rssGrowth * 100).toFixed(1)} %` },
        { measure: 'open fds, minute 5 → end', value: `${verdict.fdsWarm.toFixed(0)} → ${verdict.fdsEnd.toFixed(0)}` },
        { measure: 'threads, minute 5 → end', value: `${verdict.threadsWarm.toFixed(0)} → ${verdict.threadsEnd.toFixed(0)}` },
      );
    }
    const first = samples[0]?.fdKinds ?? {};
    const lastKinds = samples.at(-1)?.fdKinds ?? {};
    summary.push({ measure: 'descriptors by kind, first → last sample', value: [...new Set([...Object.keys(first), ...Object.keys(lastKinds)])].map((k) => `${k} ${first[k] ?? 0}→${lastKinds[k] ?? 0}`).join(', ') });
    // Resident memory by kind, mean of minute 5 against the last minute: where a growth sits.
    const kindMeans = (xs: Sample[]) => {
      const sum: Record<string, number> = {};
      for (const x of xs) for (const [k, v] of Object.entries(x.memKinds)) sum[k] = (sum[k] ?? 0) + v / xs.length;
      return sum;
    };
    const memWarm = kindMeans(warm.length ? warm : samples.slice(0, 1));
    const memLast = kindMeans(last.length ? last : samples.slice(-1));
    summary.push({ measure: 'resident MiB by kind, minute 5 → end', value: [...new Set([...Object.keys(memWarm), ...Object.keys(memLast)])].map((k) => `${k} ${(memWarm[k] ?? 0).toFixed(0)}→${(memLast[k] ?? 0).toFixed(0)}`).join(', ') });
    if (heap && restEnd) summary.push({ measure: 'at rest: RSS after two forced full collections (the rest is reachable)', value: `${restEnd.rssMiB.toFixed(0)} → ${heap.rssMiB.toFixed(0)} MiB; heap snapshot ${heap.file}` });
    printTable('soak summary', summary);
    for (const f of failures.slice(0, 10)) console.log(`failure: ${f}`);
    console.log(`\nwrote ${writeResult('soak', { minutes, streamsAtOnce, viewersAtOnce, diffusionShare, songEveryS, counts, failures, webhooks: receiver.requests.length, verdict, rest: { warm: restWarm, end: restEnd }, heap, samples })}`);
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
}
