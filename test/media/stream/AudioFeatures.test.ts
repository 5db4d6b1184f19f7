/**
 * The audio features sound-reactive params follow, on synthetic 48 kHz PCM: onsets at clicks (and
 * nowhere else), loudness in dB, the three bands, beats only from the low band.
 */
import t from 'tap';
import { AudioFeatures, HOP_SAMPLES, type AudioHop } from '../../../media/index.ts';

const RATE = 48_000;

/** Interleaved stereo int16 of `seconds`, filled by `f(time s)` in [-1, 1] (both channels). */
function pcm(seconds: number, f: (s: number) => number): Int16Array {
  const n = Math.round(seconds * RATE);
  const out = new Int16Array(2 * n);
  for (let i = 0; i < n; i++) {
    const v = Math.max(-32768, Math.min(32767, Math.round(f(i / RATE) * 32767)));
    out[2 * i] = v;
    out[2 * i + 1] = v;
  }
  return out;
}

/** Deterministic noise in [-1, 1]. */
function noise(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return (x / 2147483648) * 2 - 1;
  };
}

/** Every hop with its end time, ms; the PCM pushed in uneven chunks (as a decoder hands it). */
function run(data: Int16Array): { at: number; hop: AudioHop }[] {
  const f = new AudioFeatures();
  const hops: { at: number; hop: AudioHop }[] = [];
  const frames = data.length >> 1;
  let done = 0;
  for (const chunk of [960, 441, 1, 2000]) {
    if (done >= frames) break;
    const n = Math.min(chunk, frames - done);
    const start = done;
    f.push(data, (hop, end) => hops.push({ at: ((start + end) / RATE) * 1000, hop }), start, n);
    done += n;
  }
  if (done < frames) {
    const start = done;
    f.push(data, (hop, end) => hops.push({ at: ((start + end) / RATE) * 1000, hop }), start, frames - done);
  }
  return hops;
}

t.test('an onset at each click, within 2 ms after it, and none elsewhere', async (t) => {
  const clicksMs = [150, 420, 500, 910, 1333];
  const hiss = noise(7);
  // Quiet hiss (−66 dBFS) with 2 ms clicks of white noise at −10 dBFS.
  const data = pcm(1.6, (s) => {
    const ms = s * 1000;
    const click = clicksMs.some((c) => ms >= c && ms < c + 2);
    return (click ? 0.3 : 0.0005) * hiss();
  });
  const onsets = run(data)
    .filter((h) => h.hop.onset)
    .map((h) => h.at);
  t.equal(onsets.length, clicksMs.length, `one onset per click: ${onsets.map((o) => o.toFixed(0)).join(', ')}`);
  clicksMs.forEach((c, i) => {
    const d = (onsets[i] ?? NaN) - c;
    t.ok(d > 0 && d <= 2, `click at ${c} ms: onset ${d.toFixed(2)} ms after it`);
  });
});

t.test('a sustained tone is one onset, not one per hop', async (t) => {
  const data = pcm(1, (s) => (s >= 0.2 ? 0.5 * Math.sin(2 * Math.PI * 440 * s) : 0));
  const onsets = run(data).filter((h) => h.hop.onset);
  t.equal(onsets.length, 1);
  t.ok(Math.abs((onsets[0]?.at ?? 0) - 200) <= 2, 'at the tone start');
});

t.test('rms is the level in dB, 0 at −60 dBFS, 1 at full scale, and grows with the amplitude', async (t) => {
  const levels: number[] = [];
  for (const amp of [0.0005, 0.01, 0.1, 0.5, 1]) {
    const hops = run(pcm(0.3, (s) => amp * Math.sin(2 * Math.PI * 1000 * s)));
    const last = hops[hops.length - 1]!.hop.rms;
    // Mean square of a sine is amp²/2.
    const expected = Math.max(0, 1 + (10 * Math.log10((amp * amp) / 2)) / 60);
    t.ok(Math.abs(last - expected) < 0.02, `amp ${amp}: ${last.toFixed(3)} (expected ${expected.toFixed(3)})`);
    levels.push(last);
  }
  t.ok(levels.every((v, i) => i === 0 || v > (levels[i - 1] as number)), 'monotonic in the amplitude');
  t.equal(run(pcm(0.1, () => 0)).at(-1)?.hop.rms, 0, 'silence is 0');
});

t.test('band energies: a 60 Hz tone is low, 1 kHz mid, 10 kHz high', async (t) => {
  const bands = (hz: number) => run(pcm(0.3, (s) => 0.5 * Math.sin(2 * Math.PI * hz * s))).at(-1)!.hop;
  const low = bands(60);
  const mid = bands(1000);
  const high = bands(10_000);
  t.ok(low.low > low.mid + 0.1 && low.low > low.high + 0.1, `60 Hz: low ${low.low.toFixed(2)} mid ${low.mid.toFixed(2)} high ${low.high.toFixed(2)}`);
  t.ok(mid.mid > mid.low + 0.1 && mid.mid > mid.high + 0.1, `1 kHz: low ${mid.low.toFixed(2)} mid ${mid.mid.toFixed(2)} high ${mid.high.toFixed(2)}`);
  t.ok(high.high > high.low + 0.1 && high.high > high.mid + 0.1, `10 kHz: low ${high.low.toFixed(2)} mid ${high.mid.toFixed(2)} high ${high.high.toFixed(2)}`);
});

t.test('beats come from the low band: a kick is a beat and an onset, a hi-hat click only an onset', async (t) => {
  const hiss = noise(3);
  const kickMs = 200;
  const hatMs = 600;
  const data = pcm(1, (s) => {
    const ms = s * 1000;
    // A 60 Hz kick decaying over 100 ms; a 2 ms high-passed click (first difference of noise).
    const kick = ms >= kickMs ? 0.6 * Math.exp(-(ms - kickMs) / 100) * Math.sin(2 * Math.PI * 60 * (s - kickMs / 1000)) : 0;
    const hat = ms >= hatMs && ms < hatMs + 2 ? 0.4 * hiss() : 0;
    return kick + hat;
  });
  const hops = run(data);
  const beats = hops.filter((h) => h.hop.beat).map((h) => h.at);
  const onsets = hops.filter((h) => h.hop.onset).map((h) => h.at);
  t.equal(beats.length, 1, `one beat: ${beats.join(', ')}`);
  t.ok(beats[0]! >= kickMs && beats[0]! <= kickMs + 10, 'at the kick');
  t.ok(
    onsets.some((o) => o >= hatMs && o <= hatMs + 2),
    `the click is an onset: ${onsets.map((o) => o.toFixed(0)).join(', ')}`,
  );
  t.notOk(
    beats.some((b) => b >= hatMs - 5),
    'the click is no beat',
  );
});

t.test('hops are 1 ms: as many as whole ms pushed', async (t) => {
  t.equal(HOP_SAMPLES, 48);
  t.equal(run(pcm(0.25, () => 0)).length, 250);
});
