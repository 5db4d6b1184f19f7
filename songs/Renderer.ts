/**
 * One take, in the calling thread: mix → WAV → peaks → MP3. RenderWorker runs this off the main
 * event loop; tests and the benchmark may call it directly.
 */
import { close, closeSync, fdatasync, openSync } from 'node:fs';
import type { MasteredStems } from './Mixer.ts';
import { Mp3Stream } from './Mp3Encoder.ts';
import { writeMidi } from './MidiWriter.ts';
import { renderMix, type MixResult, type StemName } from './Mixer.ts';
import { computePeaks } from './Peaks.ts';
import type { SongPlan } from './SongPlanner.ts';
import { buildStemsZip, FileSink, writeStemsZip, type StemsZip } from './StemsZip.ts';
import { WAV_HEADER_BYTES, WavDither, writeWavHeader } from './WavWriter.ts';

export interface RenderOptions {
  /** Also render the stems zip (opt-in: about 5 × the WAV's size and some time). Default false. */
  stems?: boolean;
  /**
   * With stems: write the zip to this file (created or truncated, flushed to disk; its folder must
   * exist) instead of returning it in memory. The render worker writes it where the blob store keeps it.
   */
  stemsPath?: string;
  /** Receives the MP3 bytes as they are encoded (progressive delivery), in order. */
  onMp3Chunk?: (chunk: Buffer) => void;
  /**
   * Called once this thread's work on the take is done: every sample is in LAME's pipe and the
   * peaks, MIDI and stems are made; LAME's tail (≈ 1 s of the other core for a 120 s take) and the
   * stems' flush to disk remain. The thread may start its next take now (RenderPool does).
   */
  onThreadFree?: () => void;
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
  /** Seconds at the start mastered and encoded before the rest was rendered (the whole take for loops). */
  firstSpanSeconds: number;
  /** Standard MIDI File of the notes rendered (always: it is a few kB). */
  midi: Buffer;
  /**
   * The stems zip (null when it was written to `stemsPath`) and where each stem's WAV lies in it,
   * when asked for; else null.
   */
  stems: { zip: Buffer | null; members: Record<StemName, { offset: number; size: number }> } | null;
}

/** Audio before the first MP3 bytes are awaited: LAME emits output within its first second of input. */
const FIRST_OUTPUT_MIN_SAMPLES = 48000;

export async function renderTakeHere(plan: SongPlan, n: 1 | 2, onProgress?: (fraction: number) => void, options: RenderOptions = {}): Promise<TakeResult> {
  // The WAV is written span by span as the mixer finalises samples, and each span goes to LAME at
  // once: a song's first section is encoded (and streamed through onMp3Chunk) while the rest renders.
  const total = plan.totalSamples;
  const wav = Buffer.allocUnsafe(WAV_HEADER_BYTES + total * 4);
  writeWavHeader(wav, total, plan.sampleRate);
  const dither = new WavDither(wav, total);
  const enc = new Mp3Stream(options.onMp3Chunk);
  enc.write(wav.subarray(0, WAV_HEADER_BYTES));
  let tw = 0;
  let mix: MixResult;
  try {
    mix = await renderMix(plan, n, onProgress, {
      stems: options.stems === true,
      onFinal: async (L, R, from, to) => {
        const t = performance.now();
        dither.write(L, R, from, to);
        enc.write(wav.subarray(WAV_HEADER_BYTES + from * 4, WAV_HEADER_BYTES + to * 4));
        tw += performance.now() - t;
        // Let LAME's first bytes out (to the player) before the rest of the take renders.
        if (from === 0 && to < total && to >= FIRST_OUTPUT_MIN_SAMPLES) await enc.firstOutput();
      },
    });
  } catch (e) {
    enc.abort();
    throw e;
  }
  // Every sample is in LAME's pipe: let it finish while the peaks, MIDI and stems are made here.
  const mp3Done = enc.end();
  const t0 = performance.now();
  const waveform = computePeaks(mix.L, mix.R, mix.n, 200);
  const midi = writeMidi(plan, mix.score);
  const tp = performance.now();
  const stems = mix.stems ? stemsZip(mix.stems, wav, mix.n, plan.sampleRate, options.stemsPath) : null;
  mix.release();
  const t1 = performance.now();
  onProgress?.(0.82);
  options.onThreadFree?.();
  const [mp3] = await Promise.all([mp3Done, stems?.flushed]);
  const t2 = performance.now();
  onProgress?.(1);
  return {
    wav,
    mp3,
    waveform,
    duration: mix.n / plan.sampleRate,
    loudness: mix.loudness,
    truePeakDb: mix.truePeakDb,
    firstSpanSeconds: mix.firstSpan / plan.sampleRate,
    timings: { ...mix.timings, wavPeaks: tw + tp - t0, ...(stems ? { stemsZip: t1 - tp } : {}), mp3: t2 - t1 },
    midi,
    stems: stems ? { zip: stems.zip, members: stems.members } : null,
  };
}

/**
 * The stems zip, in memory or (with `path`) written to that file; `flushed` settles once the file
 * is on disk (as the blob store's put() does it), which runs while LAME finishes the MP3.
 */
function stemsZip(
  stems: MasteredStems, wav: Buffer, n: number, sampleRate: number, path: string | undefined,
): Omit<StemsZip, 'zip'> & { zip: Buffer | null; flushed: Promise<void> } {
  if (path === undefined) return { ...buildStemsZip(stems, wav, n, sampleRate), flushed: Promise.resolve() };
  const fd = openSync(path, 'w');
  let r: Omit<StemsZip, 'zip'>;
  try {
    r = writeStemsZip(stems, wav, n, sampleRate, new FileSink(fd));
  } catch (e) {
    closeSync(fd);
    throw e;
  }
  const flushed = new Promise<void>((resolve, reject) => {
    fdatasync(fd, (err) => {
      close(fd, () => (err ? reject(err) : resolve()));
    });
  });
  // Awaited with the MP3; kept from being unhandled should the MP3 fail first.
  flushed.catch(() => {});
  return { ...r, zip: null, flushed };
}
