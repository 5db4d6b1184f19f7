/**
 * Stems (opt-in): a zip of five 16-bit stereo 48 kHz WAVs that a real unzip reads; their
 * sample-wise sum is the take's WAV (the documented mastering: one stereo-linked master gain for
 * all, the effects stem takes the 16-bit rounding); each stem sounds like its instrument; asking
 * for stems changes nothing in the mix; the same seed gives byte-identical stems.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { renderTakeHere, type TakeResult } from '../../songs/Renderer.ts';
import { planSong } from '../../songs/SongPlanner.ts';
import { energyBelow, monoOf, pcmOf, spectralFlatness } from '../helpers/audio.ts';

const STEMS = ['drums', 'bass', 'chords', 'lead', 'effects'] as const;
const dir = mkdtempSync(join(tmpdir(), 'songs-stems-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const plan = planSong({ prompt: 'deep house with warm pads and a pluck hook', seed: 11, duration: 12 });
let withStems: TakeResult;
/** The in-memory zip of `withStems`. */
let zip: Buffer;

/** Extracts the zip with Info-ZIP's unzip (an independent reader) and returns each stem's bytes. */
function unzipStems(zip: Buffer, name: string): Record<(typeof STEMS)[number], Buffer> {
  const sub = mkdtempSync(join(dir, `${name}-`));
  writeFileSync(join(sub, 'stems.zip'), zip);
  execFileSync('unzip', ['-q', '-t', 'stems.zip'], { cwd: sub });
  execFileSync('unzip', ['-q', 'stems.zip'], { cwd: sub });
  return Object.fromEntries(STEMS.map((s) => [s, readFileSync(join(sub, `${s}.wav`))])) as Record<(typeof STEMS)[number], Buffer>;
}

function maxSumError(mixWav: Buffer, stems: Record<string, Buffer>): number {
  const mix = pcmOf(mixWav);
  const parts = STEMS.map((s) => pcmOf(stems[s] as Buffer));
  let worst = 0;
  for (let i = 0; i < mix.length; i++) {
    let sum = 0;
    for (const p of parts) sum += p[i] as number;
    worst = Math.max(worst, Math.abs(sum - (mix[i] as number)));
  }
  return worst;
}

t.before(async () => {
  withStems = await renderTakeHere(plan, 1, undefined, { stems: true });
  zip = withStems.stems!.zip!;
});

t.test('the zip holds five 16-bit stereo 48 kHz WAVs of the take length, each servable as a byte range', { timeout: 120_000 }, async (t) => {
  t.ok(withStems.stems, 'stems were rendered');
  const files = unzipStems(zip, 'a');
  for (const s of STEMS) {
    const f = join(dir, `${s}.wav`);
    writeFileSync(f, files[s]);
    const probe = JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_name,sample_rate,channels', '-of', 'json', f], { encoding: 'utf8' }));
    t.match(probe.streams[0], { codec_name: 'pcm_s16le', sample_rate: '48000', channels: 2 }, `${s} format`);
    t.equal(files[s].length, withStems.wav.length, `${s} is as long as the mix`);
    const m = withStems.stems!.members[s];
    t.ok(zip.subarray(m.offset, m.offset + m.size).equals(files[s]), `${s}: the recorded byte range is the member`);
  }
});

t.test('the stems add up to the take\'s WAV within 1 LSB, for a song and for a loop', { timeout: 180_000 }, async (t) => {
  const files = unzipStems(zip, 'sum');
  t.ok(maxSumError(withStems.wav, files) <= 1, `song: worst |Σ stems − mix| = ${maxSumError(withStems.wav, files)} LSB`);
  const loopPlan = planSong({ prompt: 'techno loop with an acid bass', seed: 4, bpm: 128, loop: true });
  const loop = await renderTakeHere(loopPlan, 2, undefined, { stems: true });
  const loopFiles = unzipStems(loop.stems!.zip!, 'loop');
  t.ok(maxSumError(loop.wav, loopFiles) <= 1, 'loop (folded tail, circular limiter) adds up too');
  // The effects stem is mostly reverb and delay, not a dump of rounding: it is quieter than the mix but not silent.
  const rms = (b: Buffer) => Math.sqrt(monoOf(pcmOf(b)).reduce((s, v) => s + v * v, 0) / (b.length / 4));
  const eff = rms(files.effects);
  t.ok(eff > rms(withStems.wav) * 0.05 && eff < rms(withStems.wav), `effects RMS ${eff.toFixed(4)}`);
});

t.test('each stem sounds like its instrument', { timeout: 60_000 }, async (t) => {
  const files = unzipStems(zip, 'content');
  const mono = Object.fromEntries(STEMS.map((s) => [s, monoOf(pcmOf(files[s]))])) as Record<(typeof STEMS)[number], Float64Array>;
  const low = Object.fromEntries(STEMS.map((s) => [s, energyBelow(mono[s], 300)]));
  const flat = Object.fromEntries(STEMS.map((s) => [s, spectralFlatness(mono[s])]));
  t.ok((low.bass as number) > 0.9, `bass: ${((low.bass as number) * 100).toFixed(1)} % of its energy below 300 Hz`);
  t.ok((low.lead as number) < 0.2, `lead: ${((low.lead as number) * 100).toFixed(1)} % below 300 Hz`);
  t.ok((low.bass as number) > (low.chords as number) && (low.bass as number) > (low.lead as number), 'bass is the lowest of the pitched stems');
  for (const s of STEMS.filter((x) => x !== 'drums')) {
    t.ok((flat.drums as number) > 3 * (flat[s] as number), `drums are the most percussive (noise-like): ${(flat.drums as number).toFixed(3)} vs ${s} ${(flat[s] as number).toFixed(3)}`);
  }
});

t.test('stems change nothing in the mix, and the same seed gives the same stem bytes, in memory or written to a file', { timeout: 120_000 }, async (t) => {
  const plain = await renderTakeHere(plan, 1);
  t.equal(plain.stems, null, 'no stems unless asked');
  t.ok(plain.wav.equals(withStems.wav), 'WAV identical with and without stems');
  t.ok(plain.mp3.equals(withStems.mp3), 'MP3 identical with and without stems');
  const path = join(dir, 'again-stems.zip');
  const again = await renderTakeHere(plan, 1, undefined, { stems: true, stemsPath: path });
  t.equal(again.stems!.zip, null, 'written to the file, not returned');
  t.same(again.stems!.members, withStems.stems!.members, 'same member ranges');
  t.ok(readFileSync(path).equals(zip), 'stems zip byte-identical (the file written chunk by chunk = the zip built in memory)');
  t.ok(again.midi.equals(withStems.midi), 'MIDI byte-identical');
  t.ok(again.wav.equals(withStems.wav), 'WAV byte-identical');
});
