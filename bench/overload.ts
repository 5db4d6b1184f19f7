/**
 * An overloaded media node with small and with large UDP receive buffers, side by side
 * (`npm run bench -- overload`).
 *
 * A real `reverie serve` on loopback takes more OBS-like publishers (libdatachannel, 512² H.264
 * at 30 fps ≈ 1.5 Mb/s, processors only) than its cores encode at full rate. Rounds alternate
 * between `WEBRTC_UDP_BUFFER_BYTES=0` (the kernel's default, `net.core.rmem_default`: what a
 * socket gets when nobody asks) and the node's default (4 MiB), each on a fresh node. Per round: the
 * packets the node's sessions lost (from its status), the kernel's count of datagrams dropped for
 * a full receive buffer (`RcvbufErrors`, /proc/net/snmp, the whole machine), and every stream's
 * median output fps: how many froze (below 1 fps) and how evenly the rest shared the cores, and
 * how many publisher sessions the node ended although their publishers kept sending.
 * `--busy` adds a busy loop on one core, a stand-in for a noisy neighbour.
 *
 * 40 s by default: past the 30 s after which an ICE agent gives up on a peer whose consent
 * responses do not come back in time (they queue behind media like any other packet).
 *
 *   npm run bench -- overload [--streams 24] [--rounds 2] [--seconds 40] [--busy]
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { freePort } from '../test/helpers/net.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { ObsPublishers } from '../test/helpers/obsPublisher.ts';
import { startServerProcess } from '../test/helpers/serverProcess.ts';
import { busyLoops, percentile, printTable, progress, writeResult, type Row } from './lib.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Datagrams the kernel dropped because a socket's receive buffer was full, machine-wide. */
function rcvbufErrors(): number {
  const lines = readFileSync('/proc/net/snmp', 'utf8').split('\n').filter((l) => l.startsWith('Udp:'));
  const names = lines[0]?.split(/\s+/) ?? [];
  const values = lines[1]?.split(/\s+/) ?? [];
  return Number(values[names.indexOf('RcvbufErrors')] ?? Number.NaN);
}

interface Status {
  state: string;
  inference_status: { output_fps: number };
  gateway_status: { ingest_metrics: { stats: { track_stats: { type: string; packets_lost: number; packets_received: number }[] } } };
}

async function round(bufferBytes: number, n: number, seconds: number, source: string): Promise<Row> {
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) };
  try {
    const port = await freePort();
    const server = await startServerProcess(t, {
      env: { PORT: String(port), HOST: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1', MEDIA_CAPACITY: String(n), WEBRTC_UDP_BUFFER_BYTES: String(bufferBytes) },
    });
    const pubs = new ObsPublishers();
    t.teardown(() => pubs.close());
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: `overload ${i}`, skip_diffusion: true } });
      if (r.status !== 201) throw new Error(`create → ${r.status} ${JSON.stringify(r.body)}`);
      const s = r.body as { id: string; whip_url: string; stream_key: string };
      const p = await pubs.publish({ url: s.whip_url, token: s.stream_key, source, httpFrom: `127.0.3.${(i % 250) + 1}` });
      if (p.status !== 201) throw new Error(`publish → ${p.status} ${p.body}`);
      ids.push(s.id);
    }
    const status = async (id: string) => ((await server.api('GET', `/v1/streams/${id}/status`)).body as { data: Status }).data;
    await sleep(8000); // every publisher's first key frames (one every 2 s)
    const drops0 = rcvbufErrors();
    const before = await Promise.all(ids.map(status));
    const fps: number[][] = ids.map(() => []);
    for (let k = 0; k < seconds / 2; k++) {
      await sleep(2000);
      (await Promise.all(ids.map(status))).forEach((s, i) => fps[i]?.push(s.inference_status.output_fps));
    }
    const after = await Promise.all(ids.map(status));
    const drops = rcvbufErrors() - drops0;
    const video = (s: Status) => s.gateway_status.ingest_metrics.stats.track_stats.find((x) => x.type === 'video') ?? { packets_lost: 0, packets_received: 0 };
    let lost = 0;
    let received = 0;
    after.forEach((s, i) => {
      const b = before[i] as Status;
      lost += video(s).packets_lost - video(b).packets_lost;
      received += video(s).packets_received - video(b).packets_received;
    });
    const medians = fps.map((xs) => percentile(xs, 50));
    const live = medians.filter((m) => m >= 1);
    return {
      'buffer bytes': bufferBytes,
      'sessions ended': after.filter((s) => s.state === 'OFFLINE').length,
      'packets lost %': (100 * lost) / Math.max(1, lost + received),
      'kernel drops': drops,
      'frozen streams (< 1 fps)': medians.length - live.length,
      'min out fps': Math.min(...medians),
      'median out fps': percentile(medians, 50),
      'max/min (live streams)': live.length > 0 ? Math.max(...live) / Math.max(1, Math.min(...live)) : null,
    };
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
}

export default async function overload(args: Map<string, string>): Promise<void> {
  const n = Number(args.get('streams') ?? 24);
  const rounds = Number(args.get('rounds') ?? 2);
  const seconds = Number(args.get('seconds') ?? 40);
  const busy = args.has('busy');
  const small = 0; // the kernel's default: the node asks for nothing
  const large = 4 * 1024 * 1024;
  const source = await stampedH264({ size: 512, frames: 300 });
  const stopBusy = busyLoops(busy ? 1 : 0);
  const rows: Row[] = [];
  try {
    const bar = progress('rounds', rounds * 2);
    for (let r = 0; r < rounds; r++) {
      for (const bytes of [small, large]) {
        rows.push({ round: r + 1, ...(await round(bytes, n, seconds, source)) });
        bar.tick();
      }
    }
    bar.done();
  } finally {
    stopBusy();
  }
  printTable(`${n} publishers on one node (512² H.264 30 fps, processors only, ${availableParallelism()} cores${busy ? ', one core busy' : ''}), rounds alternating`, rows);
  const of = (bytes: number, key: string) => rows.filter((x) => x['buffer bytes'] === bytes).map((x) => Number(x[key]));
  const summary: Row[] = ['packets lost %', 'sessions ended', 'frozen streams (< 1 fps)', 'min out fps', 'median out fps'].map((key) => ({
    measure: key,
    'kernel default (median of rounds)': percentile(of(small, key), 50),
    [`${large} B (median of rounds)`]: percentile(of(large, key), 50),
  }));
  printTable('receive buffers: kernel default vs the node default', summary);
  console.log(`\nwrote ${writeResult('overload', { cores: availableParallelism(), streams: n, seconds, busy, rmemDefault: Number(readFileSync('/proc/sys/net/core/rmem_default', 'utf8').trim()), rmemMax: Number(readFileSync('/proc/sys/net/core/rmem_max', 'utf8').trim()), rows })}`);
}
