/**
 * `npm run bench -- producer [--prompt "..."] [--duration 120] [--runs 3]`
 * What producer features cost (issue: stems, MIDI, audio while rendering), in one process on one
 * core, A/B interleaved in the same run so machine load hits both sides alike:
 * - a 2-take song rendered plain (mix + WAV + peaks + MIDI + MP3) and with stems (the same plus
 *   the stems zip); ratio target ≤ 1.3×. MIDI is written on every render, so its own cost is
 *   timed apart (writeMidi on the take's score).
 * - time to the first MP3 byte of take 1 (what a player could start on), target ≤ 1 s. Renders
 *   are not progressive yet, so this is the time until take 1's MP3 exists.
 */
import { printTable, summarize, writeResult, type Row } from './lib.ts';
import { compose } from '../songs/Composer.ts';
import { writeMidi } from '../songs/MidiWriter.ts';
import { renderTakeHere } from '../songs/Renderer.ts';
import { planSong } from '../songs/SongPlanner.ts';

export default async function producer(args: Map<string, string>): Promise<void> {
  const prompt = args.get('prompt') ?? 'uplifting trance with supersaw chords, arpeggios and a big lead';
  const duration = Number(args.get('duration') ?? 120);
  const runs = Math.max(1, Number(args.get('runs') ?? 3));
  const plan = planSong({ prompt, seed: 2024, duration });

  // Warm-up (JIT) on a short take of the same style, both paths.
  const warm = planSong({ prompt, seed: 1, duration: 10 });
  await renderTakeHere(warm, 1);
  await renderTakeHere(warm, 1, undefined, { stems: true });

  const plain: number[] = [];
  const stems: number[] = [];
  const firstByte: number[] = [];
  const stemStages: Record<string, number> = {};
  let zipBytes = 0;
  for (let r = 0; r < runs; r++) {
    // Alternate which side goes first so drift in machine load does not favour one.
    const order = r % 2 === 0 ? (['plain', 'stems'] as const) : (['stems', 'plain'] as const);
    for (const side of order) {
      const t0 = performance.now();
      const a = await renderTakeHere(plan, 1, undefined, { stems: side === 'stems' });
      const tFirst = performance.now();
      const b = await renderTakeHere(plan, 2, undefined, { stems: side === 'stems' });
      const total = (performance.now() - t0) / 1000;
      if (side === 'plain') {
        plain.push(total);
        firstByte.push((tFirst - t0) / 1000);
      } else {
        stems.push(total);
        zipBytes = (a.stems?.zip.length ?? 0) + (b.stems?.zip.length ?? 0);
        for (const tk of [a, b]) for (const k of ['stems', 'stemsZip', 'reverb', 'delay', 'voices']) stemStages[k] = (stemStages[k] ?? 0) + (tk.timings[k] ?? 0) / (2 * runs);
      }
    }
  }
  const score = compose(plan, 1);
  const m0 = performance.now();
  const midi = writeMidi(plan, score);
  const midiMs = performance.now() - m0;

  const p = summarize(plain);
  const s = summarize(stems);
  const f = summarize(firstByte);
  const rows: Row[] = [
    { path: 'baseline: 2 takes, no stems (MIDI included)', p50_s: p.p50, p95_s: p.p95, ratio: 1 },
    { path: '2 takes with stems + MIDI', p50_s: s.p50, p95_s: s.p95, ratio: s.p50 / p.p50 },
    { path: 'time to first MP3 byte, take 1', p50_s: f.p50, p95_s: f.p95, ratio: f.p50 / 1 },
  ];
  printTable(`producer: "${prompt}" ${plan.duration.toFixed(1)} s × 2 takes, ${plan.style} ${plan.bpm} bpm, runs=${runs}`, rows);
  printTable('stem-path stages (ms per take, wall)', Object.entries(stemStages).map(([stage, ms]) => ({ stage, ms })));
  console.log(`\nMIDI: ${midi.length} bytes in ${midiMs.toFixed(1)} ms per take; stems zips: ${(zipBytes / 1e6).toFixed(1)} MB for 2 takes`);
  const targets = { stemsRatio: s.p50 / p.p50 <= 1.3, firstByteUnder1s: f.p50 <= 1 };
  console.log(`targets: stems ≤ 1.3× plain: ${targets.stemsRatio ? 'met' : 'NOT met'}; first MP3 byte ≤ 1 s: ${targets.firstByteUnder1s ? 'met' : 'NOT met'}`);
  const path = writeResult('producer', { prompt, duration: plan.duration, runs, plain: p, stems: s, ratio: s.p50 / p.p50, firstMp3Byte: f, midiBytes: midi.length, midiMs, stemsZipBytes: zipBytes, stemStagesMsPerTake: stemStages, targets });
  console.log(`wrote ${path}`);
}
