/**
 * Progressive mastering cuts a song into spans: every stateful stage (reverb, delay, compressor,
 * limiter, WAV dither) must give, span by span, exactly what one pass over the whole signal gives.
 */
import t from 'tap';
import { applyCompressor, CompressorRun } from '../../songs/Compressor.ts';
import { applyDelay, Delay } from '../../songs/Delay.ts';
import { applyLimiter, limiterScratch, LimiterRun, peakEnvelope } from '../../songs/Limiter.ts';
import { Random } from '../../songs/Random.ts';
import { applyReverb, Reverb } from '../../songs/Reverb.ts';
import { WAV_HEADER_BYTES, WavDither, writeWav, writeWavHeader } from '../../songs/WavWriter.ts';

const sr = 48000;
const n = 3 * sr + 17;

/** Noise bursts with loud peaks (so the limiter and compressor have work to do). */
function signal(seed: number): Float32Array {
  const rng = new Random(seed);
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = (rng.next() * 2 - 1) * (0.2 + 0.8 * Math.abs(Math.sin(i / 9000)));
  return x;
}

function same(a: Float32Array, b: Float32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

t.test('reverb and delay in two spans equal one pass', async (t) => {
  const send = signal(1);
  const o = { rt60: 2.3, damping: 6000, preDelay: 960, wet: 0.9 };
  const aL = new Float32Array(n), aR = new Float32Array(n), bL = new Float32Array(n), bR = new Float32Array(n);
  applyReverb(send, aL, aR, n, sr, o);
  const rv = new Reverb(sr, o);
  rv.process(send, bL, bR, 0, 40_000, n);
  rv.process(send, bL, bR, 40_000, n, n);
  t.ok(same(aL, bL) && same(aR, bR), 'reverb identical');
  t.throws(() => rv.process(send, bL, bR, 1, 3, n), RangeError, 'odd span starts are refused');
  const d = { time: 17_000, feedback: 0.38, tone: 3500, wet: 0.8 };
  const cL = new Float32Array(n), cR = new Float32Array(n), eL = new Float32Array(n), eR = new Float32Array(n);
  applyDelay(send, cL, cR, n, sr, d);
  const dl = new Delay(sr, d);
  dl.process(send, eL, eR, 0, 12_345);
  dl.process(send, eL, eR, 12_345, n);
  t.ok(same(cL, eL) && same(cR, eR), 'delay identical');
});

t.test('the compressor in spans equals one pass at the same threshold', async (t) => {
  const L = signal(2), R = signal(3);
  const L2 = L.slice(), R2 = R.slice();
  const g1 = new Float32Array(n), g2 = new Float32Array(n);
  const one = new CompressorRun(-12, sr, { ratio: 2.5, attackMs: 10, releaseMs: 150 });
  one.process(L, R, 0, n, g1);
  const two = new CompressorRun(-12, sr, { ratio: 2.5, attackMs: 10, releaseMs: 150 });
  two.process(L2, R2, 0, 32 * 1000, g2);
  two.process(L2, R2, 32 * 1000, n, g2);
  t.ok(same(L, L2) && same(R, R2) && same(g1, g2), 'identical output and gain');
  t.ok(g1.some((g) => g < 0.9), 'it compressed');
  // With the threshold applyCompressor derives (RMS + 6 dB), both compute the same thing.
  const L3 = signal(2), R3 = signal(3);
  let ss = 0;
  for (let i = 0; i < n; i++) {
    const a = L3[i]!;
    const b = R3[i]!;
    ss += a * a + b * b;
  }
  const thr = 20 * Math.log10(Math.sqrt(ss / (2 * n))) + 6;
  const L4 = L3.slice(), R4 = R3.slice();
  applyCompressor(L3, R3, n, sr, { thresholdOverRms: 6, ratio: 2.5, attackMs: 10, releaseMs: 150, circular: false });
  new CompressorRun(thr, sr, { ratio: 2.5, attackMs: 10, releaseMs: 150 }).process(L4, R4, 0, n);
  t.ok(same(L3, L4), 'CompressorRun over one span is applyCompressor');
});

t.test('the limiter in spans (state saved and restored) equals applyLimiter, and a ramp keeps the ceiling', async (t) => {
  const L = signal(4), R = signal(5);
  const o = { ceiling: 0.5, lookahead: 48, release: 3840, circular: false };
  const peaks = new Float32Array(n);
  peakEnvelope(L, R, n, (o.ceiling / 1.5) * 0.85, false, peaks);
  const aL = new Float32Array(n), aR = new Float32Array(n), ga = new Float32Array(n);
  applyLimiter(L, R, 1.5, aL, aR, n, o, limiterScratch(n + 64), peaks, ga);
  const peaks2 = new Float32Array(n);
  peakEnvelope(L, R, n, (o.ceiling / 1.5) * 0.85, false, peaks2, 0, 10_000 + 64);
  peakEnvelope(L, R, n, (o.ceiling / 1.5) * 0.85, false, peaks2, 10_000, n);
  t.ok(same(peaks, peaks2), 'peak envelope in spans identical');
  const bL = new Float32Array(n), bR = new Float32Array(n), gb = new Float32Array(n);
  const run = new LimiterRun(o);
  const scratch = limiterScratch(n + 64);
  run.process(L, R, 1.5, null, 0, peaks, 0, 10_000, n, bL, bR, scratch, gb);
  const mid = run.save();
  // A pass that is thrown away, then the kept one from the saved state (as the loudness passes do).
  run.process(L, R, 3, null, 0, peaks, 10_000, n, n, bL, bR, scratch, gb);
  run.restore(mid);
  run.process(L, R, 1.5, null, 0, peaks, 10_000, n, n, bL, bR, scratch, gb);
  t.ok(same(aL, bL) && same(aR, bR) && same(ga, gb), 'identical output and gain');
  // The rest at twice the gain, reached over 0.5 s from the first span's gain (as the mixer joins
  // its spans): the output stays under the ceiling and starts where the first span left off.
  const ramp = new Float32Array(24_000);
  for (let k = 0; k < ramp.length; k++) ramp[k] = Math.pow(0.5, 1 - (k + 1) / ramp.length);
  const cL = new Float32Array(n), cR = new Float32Array(n);
  run.restore(mid);
  run.process(L, R, 3, ramp, 10_000, peaks, 10_000, n, n, cL, cR, scratch);
  let worst = 0;
  for (let i = 10_000; i < n; i++) worst = Math.max(worst, Math.abs(cL[i]!), Math.abs(cR[i]!));
  t.ok(worst <= o.ceiling * 1.001, `peak ${worst.toFixed(4)} ≤ ceiling ${o.ceiling}`);
  t.ok(Math.abs(cL[10_000]! - bL[10_000]!) <= 1e-3 * Math.abs(bL[10_000]!) + 1e-6, 'the ramp starts at the first span\'s gain');
  const rms = (x: Float32Array) => {
    let e = 0;
    for (let i = 40_000; i < n; i++) e += x[i]! * x[i]!;
    return Math.sqrt(e / (n - 40_000));
  };
  t.ok(rms(cL) > 1.03 * rms(bL), `after the ramp the rest is louder (${rms(cL).toFixed(3)} vs ${rms(bL).toFixed(3)})`);
});

t.test('WAV dither written in spans gives writeWav bytes', async (t) => {
  const L = signal(6), R = signal(7);
  const whole = writeWav(L, R, n, sr);
  const buf = Buffer.alloc(WAV_HEADER_BYTES + n * 4);
  writeWavHeader(buf, n, sr);
  const d = new WavDither(buf, n);
  d.write(L, R, 0, 777);
  d.write(L, R, 777, n);
  t.ok(buf.equals(whole), 'identical bytes');
});
