/**
 * `npm run bench -- songs [--prompt "..."] [--duration 120] [--runs 3] [--lamejs]`
 * One song (default 120 s) with 2 takes: mix + WAV + peaks + MP3 on one render thread (the way the
 * service renders it: the thread starts take 2 while LAME finishes take 1), beside the same two takes
 * one after the other in this thread (each waiting for LAME's tail), the MP3 encoder alone (native
 * LAME) on the same audio, and both takes on a pool of 2 threads; the paths take turns run by run.
 * Wall time and CPU seconds (this process's threads and every child, LAME included). Targets: ≥ 20×
 * real time per core; one render thread ≤ 1.5× the encoder alone. Both paths must give the same bytes.
 * --lamejs also times the pure-JS encoder (@breezystack/lamejs) on the same audio.
 */
import { printTable, progress, summarize, treeCpuSeconds, writeResult, type Row, type Summary } from './lib.ts';
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
  const runs = Math.max(1, Number(args.get('runs') ?? 3));
  const plan = planSong({ prompt, seed: 2024, duration });
  const audioSec = plan.duration * 2;
  const warm = planSong({ prompt, seed: 1, duration: 10 });

  // Warm-up (JIT, each render thread's encoder host): a short take of the same style on every path.
  await renderTakeHere(warm, 1);
  const one = new RenderPool({ size: 1, prewarm: true });
  const two = new RenderPool({ size: 2, prewarm: true });
  await one.render(warm, 1);
  await Promise.all([two.render(warm, 1), two.render(warm, 2)]);

  const paths = ['thread', 'sequential', 'encoder', 'pool2'] as const;
  const wall: Record<(typeof paths)[number], number[]> = { thread: [], sequential: [], encoder: [], pool2: [] };
  const cpu: Record<(typeof paths)[number], number[]> = { thread: [], sequential: [], encoder: [], pool2: [] };
  const stageSums: Record<string, number> = {};
  let last: TakeResult[] = [];
  const timed = async (path: (typeof paths)[number], work: () => Promise<void>) => {
    const c0 = treeCpuSeconds();
    const t0 = performance.now();
    await work();
    wall[path].push((performance.now() - t0) / 1000);
    cpu[path].push(treeCpuSeconds() - c0);
  };
  const bar = progress('songs', runs * paths.length);
  // The paths take turns in every run, so that the machine's load falls on all of them alike.
  for (let r = 0; r < runs; r++) {
    // The product: one render thread takes take 2 as soon as take 1 is in LAME's pipe.
    let takes: TakeResult[] = [];
    await timed('thread', async () => {
      takes = await Promise.all([one.render(plan, 1), one.render(plan, 2)]);
    });
    bar.tick();
    // The engine before: in this thread, each take waiting for its LAME tail before the next.
    await timed('sequential', async () => {
      const a = await renderTakeHere(plan, 1);
      const b = await renderTakeHere(plan, 2);
      for (const [tk, mine] of [[a, takes[0]], [b, takes[1]]] as const) {
        if (!mine || !tk.mp3.equals(mine.mp3) || !tk.wav.equals(mine.wav)) throw new Error('a take differs between the two paths');
      }
      for (const tk of [a, b]) for (const [k, v] of Object.entries(tk.timings)) stageSums[k] = (stageSums[k] ?? 0) + v / runs;
    });
    bar.tick();
    // Baseline: the encoder alone on the same audio.
    await timed('encoder', async () => {
      for (const tk of takes) await encodeMp3(tk.wav);
    });
    bar.tick();
    await timed('pool2', async () => {
      await Promise.all([two.render(plan, 1), two.render(plan, 2)]);
    });
    bar.tick();
    last = takes;
  }
  await Promise.all([one.close(), two.close()]);
  const w = Object.fromEntries(paths.map((p) => [p, summarize(wall[p])])) as Record<(typeof paths)[number], Summary>;
  const c = Object.fromEntries(paths.map((p) => [p, summarize(cpu[p])])) as Record<(typeof paths)[number], Summary>;
  const lamejs = args.has('lamejs') && last[0] ? await lamejsSeconds(last[0].wav) : null;

  const row = (path: string, p: (typeof paths)[number], cores: number): Row => ({
    path,
    p50_s: w[p].p50,
    p95_s: w[p].p95,
    cpu_p50_s: c[p].p50,
    x_realtime_per_core: audioSec / (w[p].p50 * cores),
    ratio_to_encoder: w[p].p50 / w.encoder.p50,
    cpu_ratio: c[p].p50 / c.encoder.p50,
  });
  const rows: Row[] = [
    row('song, 2 takes, 1 render thread (take 2 while LAME ends take 1)', 'thread', 1),
    row('song, 2 takes one after the other (each waits for LAME)', 'sequential', 1),
    row('baseline: MP3 encoder alone (lame), 2 takes', 'encoder', 1),
    row('song, 2 takes, pool of 2 render threads (wall)', 'pool2', 2),
  ];
  if (lamejs !== null) rows.push({ path: 'lamejs (pure JS) encoder, 1 take', p50_s: lamejs, p95_s: lamejs, cpu_p50_s: null, x_realtime_per_core: plan.duration / lamejs, ratio_to_encoder: lamejs / (w.encoder.p50 / 2), cpu_ratio: null });
  printTable(`songs: "${prompt}" ${plan.duration.toFixed(1)} s × 2 takes, ${plan.style} ${plan.bpm} bpm, runs=${runs}`, rows);
  const stages: Row[] = Object.entries(stageSums).map(([stage, ms]) => ({ stage, ms_per_take: ms / 2 }));
  printTable('stages of the one-after-the-other path (ms per take, wall)', stages);
  const ratio = w.thread.p50 / w.encoder.p50;
  const targets = { xRealtimePerCore: audioSec / w.thread.p50 >= 20, ratioToEncoder: ratio <= 1.5 };
  console.log(`\ntargets (one render thread): ≥ 20× real time per core: ${targets.xRealtimePerCore ? 'met' : 'NOT met'}; ≤ 1.5× the encoder alone: ${targets.ratioToEncoder ? 'met' : 'NOT met'} (${ratio.toFixed(2)})`);
  const path = writeResult('songs', {
    prompt,
    duration: plan.duration,
    takes: 2,
    runs,
    wall: w,
    cpu: c,
    samples: { wall, cpu },
    lamejsSeconds: lamejs,
    stagesMsPerTake: Object.fromEntries(Object.entries(stageSums).map(([k, v]) => [k, v / 2])),
    loudness: last.map((t) => t.loudness),
    truePeakDb: last.map((t) => t.truePeakDb),
    targets,
  });
  console.log(`wrote ${path}`);
}
