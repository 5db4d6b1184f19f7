/**
 * What one WHEP viewer costs the node (`npm run bench -- fanout`): the marginal node CPU per
 * viewer of the fan-out path (ViewerSet → WhepSession → libdatachannel: SRTP, the UDP send, the
 * NACK buffer, libjuice's ICE thread), this checkout's against a baseline commit's, side by side.
 *
 * Each path runs in a process of its own (this file, `--serve`), as a node would: a minimal WHEP
 * endpoint in front of one ViewerSet, fed a synthetic H.264 stream at `--kbps` (30 fps, a
 * keyframe every 2 s five times a P frame's size) from the start. The baseline's media/ is taken
 * from git (`--baseline <rev>`, default the commit before this work) into
 * bench/results/.fanout-<rev>/ (a dot folder: no typecheck, no lint). Both processes run at once
 * (the same machine load for both); their CPU (/proc: every thread, user + system) is measured
 * over `--seconds` windows, `--rounds` times, first with no viewer, then with N receive-only
 * viewers each (libdatachannel in one child process, no decoding, each POSTing its offer from its
 * own loopback address). Per packet per viewer = (CPU per packet sent at N − at 0) / N, so a
 * window in which a loaded machine sent fewer frames still compares; per viewer at the nominal
 * rate = that × packets per second. Every viewer's received packets are checked (`min recv %`).
 *
 *   npm run bench -- fanout [--viewers 100,300] [--seconds 6] [--rounds 5] [--kbps 1500] [--baseline <rev>] [--perf]
 *   (--perf: bench/results/fanout-<side>.perf.data; run node --perf-basic-prof --import tsx bench/run.ts … to name JS frames)
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pino from 'pino';
import { H264Packetizer } from '../media/webrtc/H264Packetizer.ts';
import type { PreparedOffer } from '../media/webrtc/Sdp.ts';
import { prepareOffer } from '../media/webrtc/Sdp.ts';
import { DEFAULT_MEDIA_SETTINGS } from '../media/settings.ts';
import { ObsPublishers } from '../test/helpers/obsPublisher.ts';
import { percentile, printTable, procCpuSeconds, progress, RESULTS_DIR, writeResult, type Row } from './lib.ts';

/** The last commit before this work: one UDP socket per viewer, polled by libjuice's one thread. */
const DEFAULT_BASELINE = '2dd5ab6cda55af1cf60a5010a6aac75c7064dbd8';
const FPS = 30;
/** Frames between keyframes (2 s, the encoder's default GOP). */
const GOP = 60;
const SETTINGS = { ...DEFAULT_MEDIA_SETTINGS, maxPendingViewersPerStream: 1000, maxViewersPerStream: 10_000 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What the bench needs of a ViewerSet, old or new. */
interface FanOut {
  create(offer: PreparedOffer, sessionId: string): { answer(): Promise<string> };
  sendH264(nals: readonly Uint8Array[], ts: number, keyframe: boolean): void;
  rtpTimestamp(ptsMs: number): number;
  closeAll(): void;
}

/** A P frame and a keyframe (5× its size) averaging `kbps` over a GOP, and the packets per second they make. */
function syntheticStream(kbps: number) {
  const pBytes = Math.round((((kbps * 1000) / 8 / FPS) * GOP) / (GOP + 4));
  const key = accessUnit(5 * pBytes, true);
  const delta = accessUnit(pBytes, false);
  const counter = new H264Packetizer({ ssrc: 1, payloadType: 96, maxPayload: SETTINGS.rtpMaxPayload });
  const keyPackets = counter.packetize(key, 0).length;
  const deltaPackets = counter.packetize(delta, 0).length;
  return { key, delta, keyPackets, deltaPackets, packetsPerSecond: ((keyPackets + (GOP - 1) * deltaPackets) / GOP) * FPS };
}

/** The baseline commit's media/ beside this checkout (its imports resolve to our node_modules); returns its folder. */
function baselineMedia(rev: string): { rev: string; dir: string } {
  const full = execFileSync('git', ['rev-parse', '--verify', `${rev}^{commit}`], { encoding: 'utf8' }).trim();
  const dir = join(RESULTS_DIR, `.fanout-${full.slice(0, 12)}`);
  if (!existsSync(join(dir, 'media', 'ViewerSet.ts')) && !existsSync(join(dir, 'media', 'webrtc', 'ViewerSet.ts'))) {
    mkdirSync(dir, { recursive: true });
    const tar = execFileSync('git', ['archive', full, 'media'], { maxBuffer: 64 << 20 });
    execFileSync('tar', ['-x', '-C', dir, '--exclude', 'media/gst'], { input: tar });
  }
  return { rev: full, dir: join(dir, 'media') };
}

/** One synthetic access unit: SPS, PPS and IDR for a keyframe, one slice otherwise (random bytes). */
function accessUnit(bytes: number, keyframe: boolean): Uint8Array[] {
  const nal = (type: number, n: number) => {
    const b = randomBytes(n);
    b[0] = 0x60 | type;
    return b;
  };
  return keyframe ? [nal(7, 12), nal(8, 4), nal(5, bytes)] : [nal(1, bytes)];
}

async function readBody(req: IncomingMessage): Promise<string> {
  let s = '';
  for await (const chunk of req) s += String(chunk);
  return s;
}

/**
 * `--serve <media folder>`: one node's fan-out: a ViewerSet from that folder behind a WHEP
 * endpoint on 127.0.0.1, fed from the start. Prints `{"port":…}`; answers each `stats` line on
 * stdin with `{"packets":…}` (packets the stream has sent so far).
 */
async function serve(mediaDir: string, kbps: number): Promise<void> {
  // Since media/ was cut by protocol (decision 0027) the viewer set lives in media/webrtc/.
  const webrtc = existsSync(join(mediaDir, 'webrtc', 'ViewerSet.ts')) ? join(mediaDir, 'webrtc') : mediaDir;
  const { ViewerSet } = (await import(pathToFileURL(join(webrtc, 'ViewerSet.ts')).href)) as { ViewerSet: new (opts: object) => FanOut };
  const { holdWebRtcEgress } = (await import(pathToFileURL(join(webrtc, 'WhepSession.ts')).href)) as { holdWebRtcEgress: () => () => void };
  const release = holdWebRtcEgress();
  const set = new ViewerSet({ streamId: 'bench', settings: SETTINGS, transport: { iceAddresses: ['127.0.0.1'] }, rtpTimestamp: (ptsMs: number) => Math.round(ptsMs * 90) >>> 0, logger: pino({ level: 'warn' }) });
  const stream = syntheticStream(kbps);
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      try {
        const offer = prepareOffer(await readBody(req), 'whep', { maxBytes: 20_000, maxLines: 400, allowLoopbackCandidates: true });
        const id = randomUUID();
        const answer = await set.create(offer, id).answer();
        res.writeHead(201, { 'content-type': 'application/sdp', location: `/${id}` }).end(answer);
      } catch (err) {
        res.writeHead(400).end(String(err));
      }
    })();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  let frames = 0;
  let packets = 0;
  const timer = setInterval(() => {
    const key = frames % GOP === 0;
    set.sendH264(key ? stream.key : stream.delta, set.rtpTimestamp(performance.now()), key);
    packets += key ? stream.keyPackets : stream.deltaPackets;
    frames++;
  }, 1000 / FPS);
  console.log(JSON.stringify({ port: (server.address() as { port: number }).port }));
  const rl = createInterface({ input: process.stdin });
  rl.on('line', () => console.log(JSON.stringify({ packets })));
  rl.on('close', () => {
    clearInterval(timer);
    set.closeAll();
    server.close();
    release();
  });
}

/** One fan-out process: its pid, WHEP URL and a `packets sent so far` query. */
async function startNode(mediaDir: string, kbps: number): Promise<{ child: ChildProcess; url: string; packets(): Promise<number> }> {
  const child = spawn(process.execPath, [...process.execArgv.filter((a) => a.startsWith('--perf')), '--import', 'tsx', fileURLToPath(import.meta.url), '--serve', mediaDir, '--kbps', String(kbps)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout as NonNullable<typeof child.stdout> });
  const waiting: ((v: Record<string, number>) => void)[] = [];
  lines.on('line', (l) => {
    if (l.startsWith('{')) waiting.shift()?.(JSON.parse(l) as Record<string, number>);
  });
  const next = () => new Promise<Record<string, number>>((r) => waiting.push(r));
  const { port } = await next();
  return {
    child,
    url: `http://127.0.0.1:${port}/`,
    packets: async () => {
      const reply = next();
      child.stdin?.write('stats\n');
      return (await reply)['packets'] as number;
    },
  };
}

/** CPU seconds (user + system, all threads) of a process so far. */

export default async function fanout(args: Map<string, string>): Promise<void> {
  const steps = (args.get('viewers') ?? '100,300').split(',').map(Number);
  const seconds = Number(args.get('seconds') ?? 6);
  const rounds = Number(args.get('rounds') ?? 5);
  const kbps = Number(args.get('kbps') ?? 1500);
  const base = baselineMedia(args.get('baseline') ?? DEFAULT_BASELINE);
  const { packetsPerSecond } = syntheticStream(kbps);
  const sides = ['baseline', 'current'] as const;
  type Side = (typeof sides)[number];
  const nodes = {
    baseline: await startNode(base.dir, kbps),
    current: await startNode(fileURLToPath(new URL('../media', import.meta.url)), kbps),
  };
  const pubs = new ObsPublishers();
  const viewers: Record<Side, string[]> = { baseline: [], current: [] };
  let addresses = 0;
  type Sample = { side: Side; viewers: number; round: number; cpuS: number; wallS: number; packets: number; recvPct: number };
  const samples: Sample[] = [];
  const received = async (ids: string[]) => Promise.all(ids.map(async (id) => (await pubs.stats(id)).packetsReceived ?? 0));

  /** One viewer of `side`, connected; a loaded machine sometimes loses one, so up to 3 tries. */
  const join1 = async (side: Side, httpFrom: string): Promise<string> => {
    let last = '';
    for (let attempt = 0; attempt < 3; attempt++) {
      const p = await pubs.play({ url: nodes[side].url, httpFrom });
      if (p.status === 201 && (await pubs.waitState(p.id, 'connected', 60_000).then(() => true, () => false))) return p.id;
      last = `${p.status} ${p.body.split('\n')[0] ?? ''}`;
      await pubs.stop(p.id).catch(() => undefined);
    }
    throw new Error(`viewer of ${side} did not connect in 3 tries: ${last}`);
  };

  /** One window: both processes at once, each with its viewers. */
  const measure = async (n: number, round: number, perf: boolean) => {
    const before = await Promise.all(sides.map(async (s) => ({ recv: await received(viewers[s]), packets: await nodes[s].packets(), cpu: procCpuSeconds(nodes[s].child.pid as number) })));
    const t0 = performance.now();
    // --perf: the last window of the largest step, sampled by `perf record` per process
    // (native and kernel stacks), for the per-packet breakdown in docs/performance.md.
    const recorders = perf
      ? sides.map((s) => spawn('perf', ['record', '-F', '999', '-g', '-q', '-p', String(nodes[s].child.pid), '-o', join(RESULTS_DIR, `fanout-${s}.perf.data`), '--', 'sleep', String(seconds)], { stdio: 'ignore' }))
      : [];
    await sleep(seconds * 1000);
    const after = await Promise.all(sides.map(async (s) => ({ packets: await nodes[s].packets(), cpu: procCpuSeconds(nodes[s].child.pid as number) })));
    const wallS = (performance.now() - t0) / 1000;
    await Promise.all(recorders.map((r) => new Promise((done) => r.once('exit', done))));
    await sleep(300); // packets in flight reach the viewers before they are counted
    for (const [i, s] of sides.entries()) {
      const b = before[i] as (typeof before)[number];
      const a = after[i] as (typeof after)[number];
      const packets = a.packets - b.packets;
      const recv = await received(viewers[s]);
      const got = recv.length === 0 ? 1 : Math.min(...recv.map((r, k) => (r - (b.recv[k] ?? 0)) / packets));
      samples.push({ side: s, viewers: n, round, cpuS: a.cpu - b.cpu, wallS, packets, recvPct: 100 * got });
    }
  };

  const rows: Row[] = [];
  try {
    const all = [0, ...steps];
    const bar = progress('fan-out', all.length * rounds);
    await sleep(2000); // both processes up and feeding
    for (const n of all) {
      for (const side of sides) {
        while (viewers[side].length < n) {
          const batch = Array.from({ length: Math.min(10, n - viewers[side].length) }, () => addresses++);
          const played = await Promise.all(batch.map((i) => join1(side, `127.0.${20 + Math.floor(i / 250)}.${(i % 250) + 1}`)));
          viewers[side].push(...played);
        }
      }
      await sleep(2500); // every viewer past its first keyframe
      for (let round = 0; round < rounds; round++) {
        await measure(n, round, args.has('perf') && n === steps.at(-1) && round === rounds - 1);
        bar.tick();
      }
    }
    bar.done();
    const perPacket = (x: Sample) => x.cpuS / x.packets;
    const per: Partial<Record<Side, number>> = {};
    for (const n of steps) {
      for (const side of sides) {
        const zero = samples.filter((x) => x.viewers === 0 && x.side === side).map(perPacket);
        const zeroMedian = percentile(zero, 50);
        const mine = samples.filter((x) => x.viewers === n && x.side === side);
        const us = mine.map((x) => ((perPacket(x) - zeroMedian) / n) * 1e6);
        const p50 = percentile(us, 50);
        per[side] = p50;
        rows.push({
          viewers: n,
          path: side === 'baseline' ? `baseline ${base.rev.slice(0, 7)}` : 'this checkout',
          'node cores p50': percentile(mine.map((x) => x.cpuS / x.wallS), 50),
          'cores at 0 p50': percentile(samples.filter((x) => x.viewers === 0 && x.side === side).map((x) => x.cpuS / x.wallS), 50),
          'sent packets/s p50': percentile(mine.map((x) => x.packets / x.wallS), 50),
          'µs/packet/viewer p50': p50,
          'µs/packet/viewer p95': percentile(us, 95),
          // At the nominal rate: packets/s × µs per packet = µs of CPU per second per viewer.
          'ms/s per viewer p50': (p50 * packetsPerSecond) / 1000,
          'viewers per core p50': 1e6 / (p50 * packetsPerSecond),
          'min recv %': Math.min(...mine.map((x) => x.recvPct)),
          'vs baseline': side === 'current' ? (per.current as number) / (per.baseline as number) : 1,
        });
      }
    }
    printTable(`WHEP fan-out: marginal node CPU per viewer at ${kbps} kb/s (${packetsPerSecond.toFixed(0)} packets/s nominal), ${rounds} rounds of ${seconds} s`, rows);
    console.log(`\nwrote ${writeResult('fanout', { baseline: base.rev, kbps, seconds, rounds, packetsPerSecond, rows, samples })}`);
  } finally {
    await pubs.close();
    for (const node of Object.values(nodes)) {
      node.child.stdin?.end();
      const exited = new Promise((r) => node.child.once('exit', r));
      const kill = setTimeout(() => node.child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(kill);
    }
  }
}

const argv = process.argv.slice(2);
if (process.argv[1] === fileURLToPath(import.meta.url) && argv[0] === '--serve') await serve(argv[1] as string, Number(argv[3] ?? 1500));
