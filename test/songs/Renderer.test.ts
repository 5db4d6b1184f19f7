import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { renderTakeHere, type TakeResult } from '../../songs/Renderer.ts';
import { planSong } from '../../songs/SongPlanner.ts';

const dir = mkdtempSync(join(tmpdir(), 'songs-render-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

function probe(file: string): { streams: Record<string, string | number>[]; format: Record<string, string> } {
  const out = execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_name,sample_rate,channels,bit_rate,bits_per_sample:format=duration', '-of', 'json', file], { encoding: 'utf8' });
  return JSON.parse(out) as { streams: Record<string, string | number>[]; format: Record<string, string> };
}

/** ffmpeg's ebur128 filter as an independent meter: integrated loudness (LUFS) and true peak (dBTP). */
function ebur128(file: string): { I: number; peak: number } {
  const res = spawnSync('ffmpeg', ['-hide_banner', '-nostats', '-i', file, '-af', 'ebur128=peak=true', '-f', 'null', '-'], { encoding: 'utf8' });
  const summary = res.stderr.slice(res.stderr.lastIndexOf('Summary:'));
  const I = Number(/I:\s+(-?[\d.]+) LUFS/.exec(summary)?.[1]);
  const peak = Number(/Peak:\s+(-?[\d.]+) dBFS/.exec(summary)?.[1]);
  return { I, peak };
}

function samplesOf(wav: Buffer): Int16Array {
  return new Int16Array(wav.buffer.slice(wav.byteOffset + 44, wav.byteOffset + wav.length));
}

const plan = planSong({ prompt: 'deep house with warm pads and a pluck hook', seed: 11, duration: 12 });
let take1: TakeResult;

t.before(async () => {
  take1 = await renderTakeHere(plan, 1);
});

t.test('WAV is 16-bit stereo 48 kHz PCM of exactly the planned whole-bar length', { timeout: 120_000 }, async (t) => {
  const f = join(dir, 'a.wav');
  writeFileSync(f, take1.wav);
  const p = probe(f);
  const s = p.streams[0]!;
  t.equal(s.codec_name, 'pcm_s16le');
  t.equal(Number(s.sample_rate), 48000);
  t.equal(s.channels, 2);
  t.equal(s.bits_per_sample, 16);
  t.ok(Math.abs(Number(p.format.duration) - plan.duration) < 1e-3, `duration ${p.format.duration} vs ${plan.duration}`);
  t.equal(take1.wav.length, 44 + plan.totalSamples * 4);
  t.ok(take1.duration >= 10 && take1.duration <= 120);
});

t.test('MP3 is CBR 192 kbps stereo 48 kHz (every frame 576 bytes) and as long as the WAV', { timeout: 120_000 }, async (t) => {
  const f = join(dir, 'a.mp3');
  writeFileSync(f, take1.mp3);
  const p = probe(f);
  const s = p.streams[0]!;
  t.equal(s.codec_name, 'mp3');
  t.equal(Number(s.sample_rate), 48000);
  t.equal(s.channels, 2);
  t.equal(Number(s.bit_rate), 192000);
  t.ok(Math.abs(Number(p.format.duration) - plan.duration) < 0.1, `duration ${p.format.duration}`);
  const sizes = execFileSync('ffprobe', ['-v', 'error', '-select_streams', 'a', '-show_entries', 'packet=size', '-of', 'csv=p=0', f], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .map(Number);
  t.ok(sizes.length > 100);
  t.same([...new Set(sizes)], [576], 'all packets 576 bytes');
});

t.test('loudness is −14 LUFS ±1 and true peak ≤ −1 dBTP by ffmpeg ebur128', { timeout: 120_000 }, async (t) => {
  const f = join(dir, 'a.wav');
  writeFileSync(f, take1.wav);
  const { I, peak } = ebur128(f);
  t.ok(Math.abs(I - -14) <= 1, `integrated ${I} LUFS`);
  t.ok(peak <= -1, `true peak ${peak} dBTP`);
  t.ok(Math.abs(take1.loudness - -14) < 0.5, `our meter ${take1.loudness}`);
});

t.test('waveform has 200 peaks in [0, 1] that follow the audio', { timeout: 60_000 }, async (t) => {
  const w = take1.waveform;
  t.equal(w.length, 200);
  t.ok(w.every((v) => v >= 0 && v <= 1));
  const pcm = samplesOf(take1.wav);
  const frames = pcm.length / 2;
  const rms: number[] = [];
  for (let k = 0; k < 200; k++) {
    const a = Math.floor((k * frames) / 200);
    const b = Math.floor(((k + 1) * frames) / 200);
    let s = 0;
    for (let i = a; i < b; i++) s += (pcm[2 * i]! / 32768) ** 2 + (pcm[2 * i + 1]! / 32768) ** 2;
    rms.push(Math.sqrt(s / (2 * (b - a))));
  }
  const mean = (x: number[]) => x.reduce((s, v) => s + v, 0) / x.length;
  const mw = mean(w);
  const mr = mean(rms);
  let num = 0, dw = 0, dr = 0;
  for (let k = 0; k < 200; k++) {
    num += (w[k]! - mw) * (rms[k]! - mr);
    dw += (w[k]! - mw) ** 2;
    dr += (rms[k]! - mr) ** 2;
  }
  const r = num / Math.sqrt(dw * dr);
  t.ok(r > 0.6, `correlation with windowed RMS ${r.toFixed(3)}`);
  // The fade-out drives the last peak near silence.
  t.ok(w[199]! < 0.1, `last peak ${w[199]}`);
});

t.test('same seed and settings give byte-identical WAV and MP3; take 2 and other seeds differ', { timeout: 180_000 }, async (t) => {
  const again = await renderTakeHere(plan, 1);
  t.ok(again.wav.equals(take1.wav), 'WAV identical');
  t.ok(again.mp3.equals(take1.mp3), 'MP3 identical');
  t.same(again.waveform, take1.waveform);
  const take2 = await renderTakeHere(plan, 2);
  t.equal(take2.wav.length, take1.wav.length, 'variation keeps the length');
  t.notOk(take2.wav.equals(take1.wav), 'take 2 differs');
  const other = await renderTakeHere(planSong({ prompt: 'deep house with warm pads and a pluck hook', seed: 12, duration: 12 }), 1);
  t.notOk(other.wav.equals(take1.wav), 'another seed differs');
});

t.test('a loop wraps around without a click and without a fade', { timeout: 120_000 }, async (t) => {
  const loopPlan = planSong({ prompt: 'driving techno with acid bass', seed: 5, loop: true });
  t.equal(loopPlan.bars, 8);
  const take = await renderTakeHere(loopPlan, 1);
  const pcm = samplesOf(take.wav);
  const frames = pcm.length / 2;
  t.equal(frames, loopPlan.totalSamples);
  for (let ch = 0; ch < 2; ch++) {
    const diffs: number[] = [];
    for (let i = 0; i + 1 < frames; i++) diffs.push(Math.abs(pcm[2 * (i + 1) + ch]! - pcm[2 * i + ch]!));
    diffs.sort((a, b) => a - b);
    const p999 = diffs[Math.floor(diffs.length * 0.999)]!;
    const seam = Math.abs(pcm[ch]! - pcm[2 * (frames - 1) + ch]!);
    t.ok(seam <= p999, `channel ${ch}: seam jump ${seam} ≤ p99.9 ${p999}`);
  }
  // No fade: the last half second is as loud as the rest.
  const rmsOf = (a: number, b: number) => {
    let s = 0;
    for (let i = a; i < b; i++) s += pcm[2 * i]! ** 2;
    return Math.sqrt(s / (b - a));
  };
  t.ok(rmsOf(frames - 24000, frames) > 0.3 * rmsOf(0, frames), 'end not faded');
});
