/**
 * Progressive mastering: a song's first section is mastered and its MP3 bytes come out before the
 * rest is rendered; the chunks are the finished MP3; the whole take still meets the loudness
 * target by an independent meter (ffmpeg ebur128), and the join between the spans has no click
 * (the first span ends on a section line, so the level itself may change there: the music does).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { renderTakeHere, type TakeResult } from '../../songs/Renderer.ts';
import { planSong } from '../../songs/SongPlanner.ts';
import { pcmOf } from '../helpers/audio.ts';

const dir = mkdtempSync(join(tmpdir(), 'songs-progressive-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

// 40 s of trance: a quiet 4-bar intro, then louder sections (the gain estimate has to be right).
const plan = planSong({ prompt: 'uplifting trance with supersaw chords and a big lead', seed: 7, duration: 40 });
let take: TakeResult;
const chunks: Buffer[] = [];
let chunksBeforeRest = 0;
let restRendered = false;

t.before(async () => {
  take = await renderTakeHere(plan, 1, (f) => {
    // 0.6: every note of the take is rendered (the rest's voices and drums are done).
    if (f >= 0.6) restRendered = true;
  }, {
    onMp3Chunk: (c) => {
      chunks.push(c);
      if (!restRendered) chunksBeforeRest++;
    },
  });
});

t.test('MP3 bytes come out before the rest of the take is rendered, and they are the finished MP3', { timeout: 120_000 }, async (t) => {
  t.ok(take.firstSpanSeconds >= 2 && take.firstSpanSeconds <= 8, `first span ${take.firstSpanSeconds.toFixed(2)} s`);
  t.ok(chunksBeforeRest > 0, `${chunksBeforeRest} chunks before the rest was rendered`);
  t.ok(Buffer.concat(chunks).equals(take.mp3), 'streamed bytes = finished MP3');
});

t.test('the whole take is at −14 LUFS ±1 and ≤ −1 dBTP by ffmpeg ebur128', { timeout: 120_000 }, async (t) => {
  const f = join(dir, 'p.wav');
  writeFileSync(f, take.wav);
  const res = spawnSync('ffmpeg', ['-hide_banner', '-nostats', '-i', f, '-af', 'ebur128=peak=true', '-f', 'null', '-'], { encoding: 'utf8' });
  const summary = res.stderr.slice(res.stderr.lastIndexOf('Summary:'));
  const I = Number(/I:\s+(-?[\d.]+) LUFS/.exec(summary)?.[1]);
  const peak = Number(/Peak:\s+(-?[\d.]+) dBFS/.exec(summary)?.[1]);
  t.ok(Math.abs(I - -14) <= 1, `integrated ${I} LUFS`);
  t.ok(peak <= -1, `true peak ${peak} dBTP`);
  t.ok(Math.abs(take.loudness - -14) < 0.5, `our meter ${take.loudness}`);
});

t.test('no click where the first span joins the rest', { timeout: 60_000 }, async (t) => {
  const pcm = pcmOf(take.wav);
  const frames = pcm.length / 2;
  const cut = Math.round(take.firstSpanSeconds * 48000);
  for (let ch = 0; ch < 2; ch++) {
    const diffs: number[] = [];
    for (let i = 0; i + 1 < frames; i++) diffs.push(Math.abs(pcm[2 * (i + 1) + ch]! - pcm[2 * i + ch]!));
    const sorted = [...diffs].sort((a, b) => a - b);
    const p999 = sorted[Math.floor(sorted.length * 0.999)]!;
    let worst = 0;
    for (let i = cut - 64; i < cut + 64; i++) worst = Math.max(worst, diffs[i]!);
    t.ok(worst <= p999, `channel ${ch}: largest step near the join ${worst} ≤ p99.9 ${p999}`);
  }
});
