/**
 * `npm run bench -- producer [--prompt "..."] [--duration 120] [--runs 3]`
 * What producer features cost (issue: stems, MIDI, audio while rendering), in one process on one
 * core, A/B interleaved in the same run so machine load hits both sides alike:
 * - a 2-take song rendered plain (mix + WAV + peaks + MIDI + MP3) and with stems (the same plus
 *   the stems zip); ratio target ≤ 1.3×. MIDI is written on every render, so its own cost is
 *   timed apart (writeMidi on the take's score).
 * - time to the first MP3 byte of take 1 (the first chunk LAME writes, which a player fetching
 *   the take's MP3 while the song renders receives), target ≤ 1 s; also as CPU seconds of this
 *   process up to that byte.
 * Wall time on our shared 2-core VMs swings with other people's load, so each side is also
 * measured in CPU seconds: this process (all threads) plus its children (the encoder host, LAME).
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { printTable, summarize, treeCpuSeconds, writeResult, type Row } from './lib.ts';
import type * as ComposerModule from '../songs/Composer.ts';
import type * as MidiModule from '../songs/MidiWriter.ts';
import type * as RendererModule from '../songs/Renderer.ts';
import type * as PlannerModule from '../songs/SongPlanner.ts';

export default async function producer(args: Map<string, string>): Promise<void> {
  const prompt = args.get('prompt') ?? 'uplifting trance with supersaw chords, arpeggios and a big lead';
  const duration = Number(args.get('duration') ?? 120);
  const runs = Math.max(1, Number(args.get('runs') ?? 3));
  // --engine <songs folder>: measure another copy of the engine (an older commit's songs/, for a
  // before/after run back to back; one engine per process, so one's LAME forks cannot tax the other).
  const engineDir = resolve(args.get('engine') ?? new URL('../songs', import.meta.url).pathname);
  const load = <T>(file: string) => import(pathToFileURL(join(engineDir, file)).href) as Promise<T>;
  const { compose } = await load<typeof ComposerModule>('Composer.ts');
  const { writeMidi } = await load<typeof MidiModule>('MidiWriter.ts');
  const { renderTakeHere } = await load<typeof RendererModule>('Renderer.ts');
  const { planSong } = await load<typeof PlannerModule>('SongPlanner.ts');
  const plan = planSong({ prompt, seed: 2024, duration });
  // The stems side writes each zip to a file, as the render worker does (into the blob store);
  // the files are kept until the end (deleting them would let the next run reuse their page cache).
  const zipDir = mkdtempSync(join(tmpdir(), 'bench-producer-'));
  let zipCount = 0;

  // Warm-up (JIT) on a short take of the same style, both paths.
  const warm = planSong({ prompt, seed: 1, duration: 10 });
  await renderTakeHere(warm, 1);
  await renderTakeHere(warm, 1, undefined, { stems: true });

  const plain: number[] = [];
  const stems: number[] = [];
  const plainCpu: number[] = [];
  const stemsCpu: number[] = [];
  const firstByte: number[] = [];
  /** CPU seconds of this process from the start of take 1 to its first MP3 byte (load-independent). */
  const firstByteCpu: number[] = [];
  const stemStages: Record<string, number> = {};
  const plainStages: Record<string, number> = {};
  const STAGES = ['compose', 'voices', 'drums', 'reference', 'reverb', 'bus', 'loudness', 'firstSpan', 'secondSpan', 'truepeak', 'stems', 'wavPeaks', 'stemsZip', 'mp3'];
  let zipBytes = 0;
  for (let r = 0; r < runs; r++) {
    // Alternate which side goes first so drift in machine load does not favour one.
    const order = r % 2 === 0 ? (['plain', 'stems'] as const) : (['stems', 'plain'] as const);
    for (const side of order) {
      const c0 = treeCpuSeconds();
      const t0 = performance.now();
      let tFirst = 0;
      let cFirst = 0;
      const onMp3Chunk = () => {
        if (tFirst === 0) {
          tFirst = performance.now();
          cFirst = treeCpuSeconds();
        }
      };
      const stemsPath = (k: number) => (side === 'stems' ? { stemsPath: join(zipDir, `${k}-${zipCount++}.zip`) } : {});
      const pa = stemsPath(1);
      const pb = stemsPath(2);
      const a = await renderTakeHere(plan, 1, undefined, { stems: side === 'stems', onMp3Chunk, ...pa });
      const b = await renderTakeHere(plan, 2, undefined, { stems: side === 'stems', ...pb });
      const total = (performance.now() - t0) / 1000;
      const cpu = treeCpuSeconds() - c0;
      if (side === 'plain') {
        plain.push(total);
        plainCpu.push(cpu);
        firstByte.push((tFirst - t0) / 1000);
        firstByteCpu.push(cFirst - c0);
        for (const tk of [a, b]) for (const k of STAGES) plainStages[k] = (plainStages[k] ?? 0) + (tk.timings[k] ?? 0) / (2 * runs);
      } else {
        stems.push(total);
        stemsCpu.push(cpu);
        const size = (z: Buffer | null | undefined, p: { stemsPath?: string }) => z?.length ?? (p.stemsPath ? statSync(p.stemsPath).size : 0);
        zipBytes = size(a.stems?.zip, pa) + size(b.stems?.zip, pb);
        for (const tk of [a, b]) for (const k of STAGES) stemStages[k] = (stemStages[k] ?? 0) + (tk.timings[k] ?? 0) / (2 * runs);
      }
    }
  }
  rmSync(zipDir, { recursive: true, force: true });
  const score = compose(plan, 1);
  const m0 = performance.now();
  const midi = writeMidi(plan, score);
  const midiMs = performance.now() - m0;

  const p = summarize(plain);
  const s = summarize(stems);
  const pc = summarize(plainCpu);
  const sc = summarize(stemsCpu);
  const f = summarize(firstByte);
  const fc = summarize(firstByteCpu);
  const rows: Row[] = [
    { path: 'baseline: 2 takes, no stems (MIDI included)', p50_s: p.p50, p95_s: p.p95, cpu_p50_s: pc.p50, cpu_p95_s: pc.p95, ratio_wall: 1, ratio_cpu: 1 },
    { path: '2 takes with stems + MIDI', p50_s: s.p50, p95_s: s.p95, cpu_p50_s: sc.p50, cpu_p95_s: sc.p95, ratio_wall: s.p50 / p.p50, ratio_cpu: sc.p50 / pc.p50 },
    { path: 'time to first MP3 byte, take 1 (plain side)', p50_s: f.p50, p95_s: f.p95, cpu_p50_s: fc.p50, cpu_p95_s: fc.p95, ratio_wall: null, ratio_cpu: null },
  ];
  printTable(`producer: "${prompt}" ${plan.duration.toFixed(1)} s × 2 takes, ${plan.style} ${plan.bpm} bpm, runs=${runs}`, rows);
  printTable('stages (ms per take, wall)', STAGES.map((stage) => ({ stage, plain_ms: plainStages[stage] ?? 0, stems_ms: stemStages[stage] ?? 0 })));
  console.log(`\nMIDI: ${midi.length} bytes in ${midiMs.toFixed(1)} ms per take; stems zips: ${(zipBytes / 1e6).toFixed(1)} MB for 2 takes`);
  const targets = { stemsRatioWall: s.p50 / p.p50 <= 1.3, stemsRatioCpu: sc.p50 / pc.p50 <= 1.3, firstByteUnder1s: f.p50 <= 1 };
  console.log(
    `targets: stems ≤ 1.3× plain: wall ${targets.stemsRatioWall ? 'met' : 'NOT met'}, CPU ${targets.stemsRatioCpu ? 'met' : 'NOT met'}; first MP3 byte ≤ 1 s: ${targets.firstByteUnder1s ? 'met' : 'NOT met'}`,
  );
  const path = writeResult('producer', { engine: engineDir, prompt, duration: plan.duration, runs, samples: { plain, stems, plainCpu, stemsCpu, firstByte, firstByteCpu }, plain: p, stems: s, plainCpu: pc, stemsCpu: sc, ratio: s.p50 / p.p50, ratioCpu: sc.p50 / pc.p50, firstMp3Byte: f, firstMp3ByteCpu: fc, midiBytes: midi.length, midiMs, stemsZipBytes: zipBytes, stemStagesMsPerTake: stemStages, plainStagesMsPerTake: plainStages, targets });
  console.log(`wrote ${path}`);
}
