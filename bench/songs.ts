/**
 * `npm run bench -- songs [--prompt "..."] [--duration 120] [--runs 2] [--lamejs]`
 * One song (default 120 s) with 2 takes: mix + WAV + peaks + MP3, timed in-process on one core,
 * beside the MP3 encoder alone (native LAME) on the same audio, as a ratio; then both takes on the
 * 2-worker pool. Targets (issue 3): ≥ 20× real time per core; total ≤ 2.5× encoder-alone time.
 * --lamejs also times the pure-JS encoder (@breezystack/lamejs) on the same audio.
 */
import { printTable, summarize, writeResult, type Row } from './lib.ts';
import { encodeMp3 } from '../songs/Mp3Encoder.ts';
import { RenderPool } from '../songs/RenderPool.ts';
import { renderTakeHere, type TakeResult } from '../songs/Renderer.ts';
import { planSong } from '../songs/SongPlanner.ts';

async function lamejsSeconds(wav: Buffer): Promise<number | null> {
  try {
    const mod = (await import('@breezystack/lamejs')) as unknown as {
      Mp3Encoder: new (ch: number, sr: number, kbps: number) => { encodeBuffer(l: Int16Array, r: Int16Array): Int8Array | Uint8Array; flush(): Int8Array | Uint8Array };
    };
    const pcm = new Int16Array(wav.buffer.slice(wav.byteOffset + 44, wav.byteOffset + wav.length));
    const n = pcm.length / 2;
    const l = new Int16Array(n);
    const r = new Int16Array(n);
    for (let i = 0; i < n; i++) {
      l[i] = pcm[2 * i] as number;
      r[i] = pcm[2 * i + 1] as number;
    }
    const t0 = performance.now();
    const enc = new mod.Mp3Encoder(2, 48000, 192);
    let bytes = 0;
    for (let i = 0; i < n; i += 1152) bytes += enc.encodeBuffer(l.subarray(i, i + 1152), r.subarray(i, i + 1152)).length;
    bytes += enc.flush().length;
    const s = (performance.now() - t0) / 1000;
    console.error(`lamejs: ${bytes} bytes in ${s.toFixed(2)} s`);
    return s;
  } catch (e) {
    console.error(`lamejs unavailable: ${(e as Error).message}`);
    return null;
  }
}

export default async function songs(args: Map<string, string>): Promise<void> {
  const prompt = args.get('prompt') ?? 'uplifting trance with supersaw chords, arpeggios and a big lead';
  const duration = Number(args.get('duration') ?? 120);
  const runs = Math.max(1, Number(args.get('runs') ?? 2));
  const plan = planSong({ prompt, seed: 2024, duration });
  const audioSec = plan.duration * 2;

  // Warm-up (JIT): a short take of the same style.
  await renderTakeHere(planSong({ prompt, seed: 1, duration: 10 }), 1);

  const seqTotals: number[] = [];
  const encTotals: number[] = [];
  const stageSums: Record<string, number> = {};
  let last: TakeResult[] = [];
  for (let r = 0; r < runs; r++) {
    const t0 = performance.now();
    const takes = [await renderTakeHere(plan, 1), await renderTakeHere(plan, 2)];
    seqTotals.push((performance.now() - t0) / 1000);
    for (const tk of takes) for (const [k, v] of Object.entries(tk.timings)) stageSums[k] = (stageSums[k] ?? 0) + v / runs;
    // Encoder alone on the same audio.
    const e0 = performance.now();
    for (const tk of takes) await encodeMp3(tk.wav);
    encTotals.push((performance.now() - e0) / 1000);
    last = takes;
  }
  const seq = summarize(seqTotals);
  const enc = summarize(encTotals);

  // Both takes on the 2-worker pool (wall clock; the way the service runs them).
  const pool = new RenderPool({ size: 2 });
  await Promise.all([pool.render(planSong({ prompt, seed: 1, duration: 10 }), 1), pool.render(planSong({ prompt, seed: 1, duration: 10 }), 2)]);
  const parTotals: number[] = [];
  for (let r = 0; r < runs; r++) {
    const t0 = performance.now();
    await Promise.all([pool.render(plan, 1), pool.render(plan, 2)]);
    parTotals.push((performance.now() - t0) / 1000);
  }
  await pool.close();
  const par = summarize(parTotals);
  const lamejs = args.has('lamejs') && last[0] ? await lamejsSeconds(last[0].wav) : null;

  const rows: Row[] = [
    { path: 'song, 2 takes, 1 core (mix+wav+peaks+mp3)', p50_s: seq.p50, p95_s: seq.p95, x_realtime_per_core: audioSec / seq.p50, ratio_to_encoder: seq.p50 / enc.p50 },
    { path: 'baseline: MP3 encoder alone (lame), 2 takes', p50_s: enc.p50, p95_s: enc.p95, x_realtime_per_core: audioSec / enc.p50, ratio_to_encoder: 1 },
    { path: 'song, 2 takes, pool of 2 workers (wall)', p50_s: par.p50, p95_s: par.p95, x_realtime_per_core: audioSec / (par.p50 * 2), ratio_to_encoder: par.p50 / enc.p50 },
  ];
  if (lamejs !== null) rows.push({ path: 'lamejs (pure JS) encoder, 1 take', p50_s: lamejs, p95_s: lamejs, x_realtime_per_core: plan.duration / lamejs, ratio_to_encoder: lamejs / (enc.p50 / 2) });
  printTable(`songs: "${prompt}" ${plan.duration.toFixed(1)} s × 2 takes, ${plan.style} ${plan.bpm} bpm, runs=${runs}`, rows);
  const stages: Row[] = Object.entries(stageSums).map(([stage, ms]) => ({ stage, ms_per_take: ms / 2 }));
  printTable('stages (ms per take, wall)', stages);
  const targets = { xRealtimePerCore: audioSec / seq.p50 >= 20, ratioToEncoder: seq.p50 / enc.p50 <= 2.5 };
  console.log(`\ntargets: ≥20× real time per core: ${targets.xRealtimePerCore ? 'met' : 'NOT met'}; ≤2.5× encoder: ${targets.ratioToEncoder ? 'met' : 'NOT met'}`);
  const path = writeResult('songs', {
    prompt,
    duration: plan.duration,
    takes: 2,
    runs,
    sequential: seq,
    encoderAlone: enc,
    pool2: par,
    lamejsSeconds: lamejs,
    stagesMsPerTake: Object.fromEntries(Object.entries(stageSums).map(([k, v]) => [k, v / 2])),
    loudness: last.map((t) => t.loudness),
    truePeakDb: last.map((t) => t.truePeakDb),
    targets,
  });
  console.log(`wrote ${path}`);
}
