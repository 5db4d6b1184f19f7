/**
 * One take, in the calling thread: mix → WAV → peaks → MP3. RenderWorker runs this off the main
 * event loop; tests and the benchmark may call it directly.
 */
import { encodeMp3 } from './Mp3Encoder.ts';
import { writeMidi } from './MidiWriter.ts';
import { renderMix, type StemName } from './Mixer.ts';
import { computePeaks } from './Peaks.ts';
import type { SongPlan } from './SongPlanner.ts';
import { buildStemsZip } from './StemsZip.ts';
import { writeWav } from './WavWriter.ts';

export interface RenderOptions {
  /** Also render the stems zip (opt-in: about 5 × the WAV's size and some time). Default false. */
  stems?: boolean;
  /** Receives the MP3 bytes as they are encoded (progressive delivery), in order. */
  onMp3Chunk?: (chunk: Buffer) => void;
}

export interface TakeResult {
  wav: Buffer;
  mp3: Buffer;
  /** 200 peaks in [0, 1], start to end. */
  waveform: number[];
  /** Seconds (whole bars). */
  duration: number;
  /** Measured by our BS.1770 meter after mastering. */
  loudness: number;
  truePeakDb: number;
  /** Milliseconds per stage. */
  timings: Record<string, number>;
  /** Standard MIDI File of the notes rendered (always: it is a few kB). */
  midi: Buffer;
  /** The stems zip and where each stem's WAV lies in it, when asked for; else null. */
  stems: { zip: Buffer; members: Record<StemName, { offset: number; size: number }> } | null;
}

export async function renderTakeHere(plan: SongPlan, n: 1 | 2, onProgress?: (fraction: number) => void, options: RenderOptions = {}): Promise<TakeResult> {
  const mix = renderMix(plan, n, onProgress, { stems: options.stems === true });
  const t0 = performance.now();
  const wav = writeWav(mix.L, mix.R, mix.n, plan.sampleRate);
  const waveform = computePeaks(mix.L, mix.R, mix.n, 200);
  const midi = writeMidi(plan, mix.score);
  const tw = performance.now();
  const stems = mix.stems ? buildStemsZip(mix.stems, wav, mix.n, plan.sampleRate) : null;
  const t1 = performance.now();
  onProgress?.(0.82);
  const mp3 = await encodeMp3(wav, options.onMp3Chunk);
  const t2 = performance.now();
  onProgress?.(1);
  return {
    wav,
    mp3,
    waveform,
    duration: mix.n / plan.sampleRate,
    loudness: mix.loudness,
    truePeakDb: mix.truePeakDb,
    timings: { ...mix.timings, wavPeaks: tw - t0, ...(stems ? { stemsZip: t1 - tw } : {}), mp3: t2 - t1 },
    midi,
    stems: stems ? { zip: stems.zip, members: stems.members } : null,
  };
}
