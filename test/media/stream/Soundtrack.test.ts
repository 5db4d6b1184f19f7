/**
 * The soundtrack's mix, block by block: the take is placed on the clock at startAt to the sample,
 * loops without a gap or a repeated sample, ends when it does not loop, ducks the publisher's tone
 * by the set dB (ramped, never a step) while it sounds, and saturates instead of wrapping.
 */
import t from 'tap';
import { Soundtrack, takePcm, type SoundtrackSpec } from '../../../media/stream/Soundtrack.ts';

const RATE = 48_000;
const spec = (over: Partial<SoundtrackSpec> = {}): SoundtrackSpec => ({ songId: 'sng_t', take: 1, wavKey: 'songs/sng_t/1.wav', startAt: 1_000_000, loop: false, gainDb: 0, duckPublisherDb: 0, ...over });

/** A take whose left sample i is i (its frame number) and right sample is −i: where it plays is readable from the output. */
function rampTake(frames: number): Int16Array {
  const pcm = new Int16Array(frames * 2);
  for (let i = 0; i < frames; i++) {
    pcm[2 * i] = i;
    pcm[2 * i + 1] = -i;
  }
  return pcm;
}

/** Renders `total` frames in blocks of uneven sizes (as a timer firing late makes them), from wall time atMs. */
function renderAll(s: Soundtrack, total: number, atMs: number, publisher: (i: number) => number = () => 0): Int16Array {
  const out = new Int16Array(total * 2);
  const sizes = [480, 517, 1, 960, 333];
  let done = 0;
  for (let k = 0; done < total; k++) {
    const n = Math.min(sizes[k % sizes.length]!, total - done);
    const pub = new Int16Array(n * 2);
    for (let i = 0; i < n; i++) pub[2 * i] = pub[2 * i + 1] = publisher(done + i);
    const block = new Int16Array(n * 2);
    s.render(block, n, atMs + (done / RATE) * 1000, pub);
    out.set(block, done * 2);
    done += n;
  }
  return out;
}

t.test('the take starts at startAt to the sample, loops gaplessly, and reports its position', async (t) => {
  const frames = 1000;
  const s = new Soundtrack(spec({ loop: true }), rampTake(frames));
  // The first block starts 250 frames before startAt.
  const out = renderAll(s, 3500, 1_000_000 - (250 / RATE) * 1000);
  t.ok(out.slice(0, 2 * 250).every((v) => v === 0), 'before the start: silence');
  let wrong = 0;
  for (let i = 250; i < 3500; i++) if (out[2 * i] !== (i - 250) % frames || out[2 * i + 1] !== -((i - 250) % frames)) wrong++;
  t.equal(wrong, 0, 'every output frame after the start is take frame (i − start) mod len: no gap, no repeat at the seams');
  const st = s.status(1_000_000 + (2500 / RATE) * 1000);
  t.equal(st.state, 'playing');
  t.equal(st.loops, 2);
  t.ok(Math.abs(st.positionS - 500 / RATE) < 1e-9, `position ${st.positionS}`);
  t.equal(new Soundtrack(spec(), rampTake(frames)).status(1_000_000 - 5).state, 'waiting');
});

t.test('without loop the take ends, then the publisher alone', async (t) => {
  const s = new Soundtrack(spec(), rampTake(1000));
  const out = renderAll(s, 1500, 1_000_000, () => 7);
  t.equal(out[2 * 999], 999 + 7, 'the last take frame, over the publisher');
  t.ok(out.slice(2 * 1010).every((v) => v === 7), 'after the end: the publisher only, at full gain');
  t.equal(s.status(1_000_000 + 1000).state, 'ended');
});

t.test('ducking: the publisher is attenuated by the set dB (±1 dB) while the take sounds, ramped', async (t) => {
  for (const db of [-6, -12, -20]) {
    const silentTake = new Int16Array(RATE * 2); // 1 s take of silence: the output is the ducked publisher alone
    const s = new Soundtrack(spec({ duckPublisherDb: db }), silentTake);
    const tone = (i: number) => Math.round(10_000 * Math.sin((2 * Math.PI * 1000 * i) / RATE));
    const before = RATE / 4;
    const out = renderAll(s, before + RATE + RATE / 4, 1_000_000 - (before / RATE) * 1000, tone);
    const rmsOf = (from: number, to: number) => {
      let sum = 0;
      for (let i = from; i < to; i++) sum += (out[2 * i] as number) ** 2;
      return Math.sqrt(sum / (to - from));
    };
    const full = rmsOf(0, before);
    const ducked = rmsOf(before + RATE / 10, before + RATE);
    const after = rmsOf(before + RATE + RATE / 10, before + RATE + RATE / 4);
    const measured = 20 * Math.log10(ducked / full);
    t.ok(Math.abs(measured - db) <= 1, `${db} dB asked, ${measured.toFixed(2)} dB measured`);
    t.ok(Math.abs(20 * Math.log10(after / full)) <= 0.5, 'full level again after the take ended');
    let step = 0;
    for (let i = 1; i < out.length / 2; i++) step = Math.max(step, Math.abs((out[2 * i] as number) - (out[2 * i - 2] as number)));
    const toneStep = 10_000 * 2 * Math.sin((Math.PI * 1000) / RATE) + 2;
    t.ok(step <= toneStep, `no step beyond the tone's own (${step} ≤ ${toneStep.toFixed(0)}): the gain ramps`);
  }
});

t.test('gain and saturation: a loud take over a loud publisher clips, never wraps', async (t) => {
  const take = new Int16Array(200).fill(30_000);
  const s = new Soundtrack(spec({ gainDb: 6 }), take);
  const out = new Int16Array(200);
  s.render(out, 100, 1_000_000, new Int16Array(200).fill(30_000));
  t.ok(out.every((v) => v === 32_767), 'held at full scale');
});

t.test('takePcm reads the 48 kHz stereo 16-bit WAV the renderer writes, and nothing else', async (t) => {
  const wav = Buffer.alloc(44 + 8);
  wav.write('RIFF', 0, 'ascii');
  wav.writeUInt32LE(36 + 8, 4);
  wav.write('WAVEfmt ', 8, 'ascii');
  wav.writeUInt32LE(16, 16);
  wav.writeUInt16LE(1, 20);
  wav.writeUInt16LE(2, 22);
  wav.writeUInt32LE(RATE, 24);
  wav.writeUInt32LE(RATE * 4, 28);
  wav.writeUInt16LE(4, 32);
  wav.writeUInt16LE(16, 34);
  wav.write('data', 36, 'ascii');
  wav.writeUInt32LE(8, 40);
  wav.writeInt16LE(-5, 44);
  wav.writeInt16LE(9, 50);
  t.same([...takePcm(wav)], [-5, 0, 0, 9]);
  const mono = Buffer.from(wav);
  mono.writeUInt16LE(1, 22);
  t.throws(() => takePcm(mono), /stereo/);
  const at44k = Buffer.from(wav);
  at44k.writeUInt32LE(44_100, 24);
  t.throws(() => takePcm(at44k), /48 kHz/);
});
