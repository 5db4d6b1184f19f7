/**
 * Sound-reactive params: what a mapping (`audio_mappings`) costs the node.
 *
 * 1. Feature extraction alone (media/stream/AudioFeatures.ts): CPU ms per second of 48 kHz stereo audio,
 *    over `--reps` runs of 10 s of music-like PCM (kicks, noise hats, a tone), in % of one core.
 * 2. Whole streams: the real server (API + media node in this process) holds `--streams`
 *    passthrough streams (256², 30 fps VP8 and Opus clicks from wrtc publishers in child
 *    processes); one mapping (publisher rms → delta) is set and cleared for all of them in
 *    alternating windows of `--window-s` seconds (off, on, on, off, … so a drift of the shared
 *    machine's load cancels). Node CPU = this process's CPU time (all threads: GStreamer's Opus
 *    decoder, libdatachannel, JS) per wall second, in % of one core, per window. "on" adds the
 *    publisher's Opus decoder (GStreamer) and the extraction; "off" is the same stream without.
 *
 *   npm run bench -- audioMappings [--streams 2] [--windows 6] [--window-s 6] [--reps 20]
 */
import { AudioFeatures } from '../media/index.ts';
import { startLiveServer } from '../test/helpers/liveServer.ts';
import { wrtcSoundPublish } from '../test/media/wrtcPeers.ts';
import { printTable, progress, summarize, writeResult, type Row } from './lib.ts';

const RATE = 48_000;

/** 10 s of music-like stereo PCM: a kick every 500 ms, a noise hat every 250 ms, a quiet 220 Hz tone. */
function music(): Int16Array {
  const n = 10 * RATE;
  const out = new Int16Array(2 * n);
  let x = 1;
  for (let i = 0; i < n; i++) {
    const ms = (i / RATE) * 1000;
    const k = ms % 500;
    const h = ms % 250;
    x = (x * 1103515245 + 12345) % 2147483648;
    const v = 0.5 * Math.exp(-k / 60) * Math.sin((2 * Math.PI * 60 * k) / 1000) + (h < 3 ? 0.2 * ((x / 2147483648) * 2 - 1) : 0) + 0.05 * Math.sin((2 * Math.PI * 220 * i) / RATE);
    out[2 * i] = out[2 * i + 1] = Math.round(v * 32767);
  }
  return out;
}

function extraction(reps: number): { pctOfCore: number[] } {
  const pcm = music();
  const f = new AudioFeatures();
  let hops = 0;
  // Warm-up: the JIT compiles the loop.
  f.push(pcm, () => hops++);
  const pct: number[] = [];
  for (let r = 0; r < reps; r++) {
    const c0 = process.cpuUsage();
    // Pushed in 20 ms packets, as the Opus decoder hands them.
    for (let at = 0; at < pcm.length / 2; at += 960) f.push(pcm, () => hops++, at, Math.min(960, pcm.length / 2 - at));
    const c1 = process.cpuUsage(c0);
    // CPU ms per 10 s of audio → % of one core.
    pct.push(((c1.user + c1.system) / 1000 / 10_000) * 100);
  }
  return { pctOfCore: pct };
}

export default async function audioMappings(args: Map<string, string>): Promise<void> {
  const streams = Number(args.get('streams') ?? 2);
  const windows = Number(args.get('windows') ?? 6);
  const windowS = Number(args.get('window-s') ?? 6);
  const reps = Number(args.get('reps') ?? 20);

  const ex = summarize(extraction(reps).pctOfCore);
  printTable(`Audio feature extraction alone: % of one core per stream (10 s of 48 kHz stereo per run, ${reps} runs)`, [{ what: 'AudioFeatures.push', cpu_p50_pct: ex.p50, cpu_p95_pct: ex.p95, runs: ex.n }]);

  const teardowns: (() => unknown)[] = [];
  const scope = { teardown: (fn: () => unknown) => teardowns.push(fn) };
  try {
    const { url, api } = await startLiveServer(scope, { plan: 'internal' });
    const ids: string[] = [];
    for (let i = 0; i < streams; i++) {
      const created = (await api('POST', '/v1/streams', { params: { prompt: 'bench', width: 384, height: 384, skip_diffusion: true } })).body;
      const pub = await wrtcSoundPublish(scope, `${url}/live/${created['id']}/whip`, { kind: 'clicks', startMs: 500, periodMs: 250, count: 100_000 }, created['stream_key'] as string);
      if (pub.status !== 201) throw new Error(`publish failed: ${pub.status}`);
      ids.push(created['id'] as string);
    }
    // Warm: every stream has output for 3 s (bounded: 600 polls of 250 ms).
    for (let i = 0; i < 600; i++) {
      const starts = await Promise.all(ids.map(async (id) => ((await api('GET', `/v1/streams/${id}/status`)).body['data']?.['inference_status']?.['start_time'] as number | undefined) ?? 0));
      if (starts.every((s) => s > 0 && Date.now() - s > 3000)) break;
      await new Promise((r) => setTimeout(r, 250)); // poll interval
    }
    const mapping = [{ source: 'publisher', feature: 'rms', param: 'delta', range: [0.3, 0.9], smoothing_ms: 50 }];
    const cpu: Record<'off' | 'on', number[]> = { off: [], on: [] };
    const bar = progress('windows', windows * 2);
    for (let w = 0; w < windows * 2; w++) {
      const mode = (['off', 'on', 'on', 'off'] as const)[w % 4] as 'off' | 'on';
      for (const id of ids) {
        const res = await api('PATCH', `/v1/streams/${id}`, { params: { audio_mappings: mode === 'on' ? mapping : [] } });
        if (res.status !== 200) throw new Error(`mapping ${mode}: ${res.status} ${JSON.stringify(res.body)}`);
      }
      await new Promise((r) => setTimeout(r, 1000)); // the first second after a change settles (the decoder starts)
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, windowS * 1000)); // the measured window
      const c1 = process.cpuUsage(c0);
      cpu[mode].push(((c1.user + c1.system) / 1000 / (performance.now() - t0)) * 100);
      if (mode === 'on') {
        const st = (await api('GET', `/v1/streams/${ids[0]}/status`)).body['data'];
        if (!Array.isArray(st?.['audio_mappings'])) throw new Error(`status shows no mappings: ${JSON.stringify(st)}`);
      }
      bar.tick();
    }
    bar.done();
    const off = summarize(cpu.off);
    const on = summarize(cpu.on);
    const rows: Row[] = [
      { mapping: 'off', cpu_p50_pct: off.p50, cpu_p95_pct: off.p95, windows: off.n },
      { mapping: 'on (publisher rms → delta)', cpu_p50_pct: on.p50, cpu_p95_pct: on.p95, windows: on.n },
    ];
    printTable(`Audio mappings: node CPU, ${streams} × 384² 30 fps passthrough streams, ${windows} windows of ${windowS} s per condition, alternating`, rows);
    const perStream = (on.p50 - off.p50) / streams;
    console.log(`on ÷ off p50 ${(on.p50 / off.p50).toFixed(3)}×; on − off p50 ${perStream.toFixed(2)} % of a core per stream (extraction alone ${ex.p50.toFixed(3)} %)`);
    console.log(
      `wrote ${writeResult('audioMappings', { streams, windows, windowS, extraction: ex, ratioP50: on.p50 / off.p50, perStreamPct: perStream, rows, raw: cpu })}`,
    );
  } finally {
    for (const fn of teardowns.reverse()) await fn();
  }
}
