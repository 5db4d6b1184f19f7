/**
 * One take, in the calling thread: mix → WAV → peaks → MP3. RenderWorker runs this off the main
 * event loop; tests and the benchmark may call it directly.
 */
import { encodeMp3 } from './Mp3Encoder.ts';
import { renderMix } from './Mixer.ts';
import { computePeaks } from './Peaks.ts';
import type { SongPlan } from './SongPlanner.ts';
import { writeWav } from './WavWriter.ts';

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
}

export async function renderTakeHere(plan: SongPlan, n: 1 | 2, onProgress?: (fraction: number) => void): Promise<TakeResult> {
  const mix = renderMix(plan, n, onProgress);
  const t0 = performance.now();
  const wav = writeWav(mix.L, mix.R, mix.n, plan.sampleRate);
  const waveform = computePeaks(mix.L, mix.R, mix.n, 200);
  const t1 = performance.now();
  onProgress?.(0.82);
  const mp3 = await encodeMp3(wav);
  const t2 = performance.now();
  onProgress?.(1);
  return {
    wav,
    mp3,
    waveform,
    duration: mix.n / plan.sampleRate,
    loudness: mix.loudness,
    truePeakDb: mix.truePeakDb,
    timings: { ...mix.timings, wavPeaks: t1 - t0, mp3: t2 - t1 },
  };
}
