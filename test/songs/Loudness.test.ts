import t from 'tap';
import { integratedLoudness, toDb, truePeak } from '../../songs/Loudness.ts';

const sr = 48000;
function sine(freq: number, amp: number, seconds: number, phase = 0): Float32Array {
  const n = Math.round(seconds * sr);
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = amp * Math.sin((2 * Math.PI * freq * i) / sr + phase);
  return x;
}

t.test('BS.1770: a 997 Hz sine at −20 dBFS in both channels reads −20 LUFS', async (t) => {
  const x = sine(997, 0.1, 10);
  const l = integratedLoudness(x, x, x.length, sr);
  t.ok(Math.abs(l - -20) < 0.1, `${l.toFixed(3)} LUFS`);
});

t.test('BS.1770 gating: silence does not pull the integrated value down', async (t) => {
  const loud = sine(997, 0.1, 10);
  const x = new Float32Array(loud.length * 2);
  x.set(loud, 0);
  const l = integratedLoudness(x, x, x.length, sr);
  t.ok(Math.abs(l - -20) < 0.1, `${l.toFixed(3)} LUFS with 10 s of silence`);
  t.equal(integratedLoudness(new Float32Array(sr * 2), new Float32Array(sr * 2), sr * 2, sr), -Infinity);
});

t.test('true peak finds inter-sample peaks that the sample peak misses', async (t) => {
  // fs/4 sine at 45°: every sample is ±0.707·A, the waveform peaks at A between samples.
  const x = sine(sr / 4, 0.5, 1, Math.PI / 4);
  let samplePeak = 0;
  for (const v of x) samplePeak = Math.max(samplePeak, Math.abs(v));
  const tp = truePeak(x, x, x.length);
  t.ok(toDb(samplePeak) < toDb(0.5) - 2.5, `sample peak ${toDb(samplePeak).toFixed(2)} dB`);
  t.ok(Math.abs(toDb(tp) - toDb(0.5)) < 0.3, `true peak ${toDb(tp).toFixed(2)} dB vs ${toDb(0.5).toFixed(2)}`);
});
