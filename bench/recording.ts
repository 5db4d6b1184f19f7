/**
 * Recording: what writing a stream's output to disk costs the node. The real server (embedded
 * default: API + media node in this process) holds `--streams` streams (512², 30 fps, OBS-like
 * publishers in a child process); recording is turned off and on for all of them in alternating
 * windows of `--window-s` seconds (off, on, on, off, … so a drift of the load over the run
 * cancels), so both conditions see the same load on this shared machine. The clip buffer is on throughout (it always is); "on" adds the recording
 * writer. Node CPU = this process's CPU time (all threads: GStreamer, libdatachannel, JS) per
 * wall second, in % of one core, per window. Also: the remux of each finished recording to one
 * MP4 (ms).
 *
 *   npm run bench -- recording [--streams 2] [--windows 6] [--window-s 6] [--size 512] [--hls-watch]
 *
 * The publishers send an Opus track of silence frames (3-byte packets, as an encoder does for a
 * muted microphone). The run measures two phases, each on its own server: first with the AAC
 * encoder run on silence frames (`aacForSilence`, what the node did before), then as it does now
 * (the AAC encoder waits for the first packet that carries sound; the outputs fill silence until
 * then). `--hls-watch` keeps an HLS player's demand on every stream in both conditions.
 *
 * Target (outputs issue): CPU with recording + clip buffer ≤ 1.1 × without.
 */
import { startLiveServer, type Json } from '../test/helpers/liveServer.ts';
import { measureOnOff, publishPassthroughStreams } from './passthroughStreams.ts';
import { printTable, summarize, writeResult, type Row } from './lib.ts';

export default async function recording(args: Map<string, string>): Promise<void> {
  const streams = Number(args.get('streams') ?? 2);
  const windows = Number(args.get('windows') ?? 6);
  const windowS = Number(args.get('window-s') ?? 6);
  const size = Number(args.get('size') ?? 512);
  const hlsWatch = args.has('hls-watch');
  // Before and after, in one run: the AAC encoder on silence frames (the old behaviour), then the default.
  const phases = [
    { name: 'AAC encoder on silence (before)', aacForSilence: true },
    { name: 'AAC encoder waits for sound (now)', aacForSilence: false },
  ];
  const results: Array<{ phase: string; rows: Row[]; ratio: number; ratioPerFrame: number; remux: ReturnType<typeof summarize>; durationS: number; raw: unknown }> = [];
  for (const phase of phases) {
    results.push({ phase: phase.name, ...(await measure({ streams, windows, windowS, size, hlsWatch, aacForSilence: phase.aacForSilence })) });
  }
  const all: Row[] = [];
  for (const r of results) {
    for (const row of r.rows) all.push({ phase: r.phase, ...row });
  }
  printTable(`Recording: node CPU, ${streams} × ${size}² 30 fps streams (OBS-like publishers: H.264 + Opus silence frames)${hlsWatch ? ', HLS watched' : ''}, ${windows} windows of ${windowS} s per condition, alternating; target on ÷ off ≤ 1.1×`, all);
  for (const r of results) {
    console.log(`${r.phase}: on ÷ off p50 ${r.ratio.toFixed(3)}× per second, ${r.ratioPerFrame.toFixed(3)}× per output frame; remux to one MP4 p50 ${r.remux.p50.toFixed(0)} ms, p95 ${r.remux.p95.toFixed(0)} ms for ≈ ${r.durationS.toFixed(1)} s`);
  }
  console.log(`wrote ${writeResult('recording', { streams, size, windows, windowS, hlsWatch, phases: results.map((r) => ({ phase: r.phase, ratioP50: r.ratio, ratioPerFrameP50: r.ratioPerFrame, remuxMs: r.remux, raw: r.raw })) })}`);
}

async function measure(o: { streams: number; windows: number; windowS: number; size: number; hlsWatch: boolean; aacForSilence: boolean }) {
  const { streams, windows, windowS, size, hlsWatch } = o;
  const teardowns: (() => unknown)[] = [];
  const scope = { teardown: (fn: () => unknown) => teardowns.push(fn) };
  try {
    const { url, api } = await startLiveServer(scope, { env: { ROLES: 'api,media' }, plan: 'internal', mediaSettings: { aacForSilence: o.aacForSilence } });
    const { ids, playbackIds } = await publishPassthroughStreams(scope, { url, api }, { streams, size });

    const { cpu, fps, perFrame } = await measureOnOff({ url, api }, { ids, playbackIds }, {
      windows,
      windowS,
      hlsWatch,
      toggle: async (mode) => {
        for (const id of ids) await api('PATCH', `/v1/streams/${id}`, { record: mode === 'on' });
      },
    });
    for (const id of ids) await api('PATCH', `/v1/streams/${id}`, { record: false });

    // Remux of each finished recording (≈ windowS s each) to one MP4.
    const remux: number[] = [];
    const durations: number[] = [];
    for (const id of ids) {
      const recs = (await api('GET', `/v1/streams/${id}/recordings`)).body['data'] as Json[];
      for (const rec of recs.slice(0, 3)) {
        const t0 = performance.now();
        const res = await api('GET', `/v1/streams/${id}/recordings/${rec['id']}.mp4`);
        if (res.status !== 302) continue;
        remux.push(performance.now() - t0);
        durations.push(Number(rec['duration']));
      }
    }

    const off = summarize(cpu.off);
    const on = summarize(cpu.on);
    const rows: Row[] = [
      { recording: 'off (clip buffer only)', cpu_p50_pct: off.p50, cpu_p95_pct: off.p95, out_fps_p50: summarize(fps.off).p50, cpu_ms_per_frame_p50: summarize(perFrame.off).p50, cpu_ms_per_frame_p95: summarize(perFrame.off).p95, windows: off.n },
      { recording: 'on (+ recording writer)', cpu_p50_pct: on.p50, cpu_p95_pct: on.p95, out_fps_p50: summarize(fps.on).p50, cpu_ms_per_frame_p50: summarize(perFrame.on).p50, cpu_ms_per_frame_p95: summarize(perFrame.on).p95, windows: on.n },
    ];
    const ratio = on.p50 / off.p50;
    const ratioPerFrame = summarize(perFrame.on).p50 / summarize(perFrame.off).p50;
    return { rows, ratio, ratioPerFrame, remux: summarize(remux), durationS: summarize(durations).p50, raw: { cpu: { off, on, samples: cpu, perFrame }, fps } };
  } finally {
    for (const fn of teardowns.reverse()) await fn();
  }
}
