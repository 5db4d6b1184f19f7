import t from 'tap';
import { ArtistRefusedError } from '../../songs/ArtistFilter.ts';
import { barsFor, planSong } from '../../songs/SongPlanner.ts';

t.test('a plan is JSON-serialisable and its sections cover every bar exactly once', async (t) => {
  const plan = planSong({ prompt: 'uplifting trance', seed: 1 });
  t.same(JSON.parse(JSON.stringify(plan)), plan);
  t.equal(plan.sections.reduce((s, x) => s + x.bars, 0), plan.bars);
  let start = 0;
  for (const s of plan.sections) {
    t.equal(s.startBar, start);
    start += s.bars;
  }
  t.equal(plan.sections[0]?.kind, 'intro');
  t.equal(plan.sections.at(-1)?.kind, 'outro');
});

t.test('bpm: request, then a number in the words, then tempo words, then the genre, else 100', async (t) => {
  t.equal(planSong({ prompt: 'house at 126 bpm', bpm: 90, seed: 1 }).bpm, 90);
  t.equal(planSong({ prompt: 'house at 126 bpm', seed: 1 }).bpm, 126);
  t.equal(planSong({ prompt: 'slow house', seed: 1 }).bpm, 118);
  t.equal(planSong({ prompt: 'house', seed: 1 }).bpm, 124);
  t.equal(planSong({ prompt: 'drum and bass', seed: 1 }).bpm, 174);
  t.equal(planSong({ prompt: 'a nice tune', seed: 1 }).bpm, 100);
  t.equal(planSong({ prompt: 'slow tune', seed: 1 }).bpm, 72);
});

t.test('key: request field, else words; keyRequested is null when none was asked', async (t) => {
  t.equal(planSong({ prompt: 'pop in F# minor', key: 'Db major', seed: 1 }).key, 'Db major');
  const w = planSong({ prompt: 'pop in F# minor', seed: 1 });
  t.equal(w.key, 'F# minor');
  t.equal(w.keyRequested, 'F# minor');
  const none = planSong({ prompt: 'pop', seed: 1 });
  t.equal(none.keyRequested, null);
  t.match(none.key, /^[A-G][#b]? (major|minor)$/);
  t.equal(planSong({ prompt: 'sad piano', seed: 5 }).mode, 'minor');
});

t.test('length is whole bars within 10–120 s, never longer than asked unless 10 s forces it; loops default to 8 bars', async (t) => {
  for (const bpm of [60, 70, 97, 100, 123, 174, 200]) {
    for (const d of [10, 11, 33.3, 59.9, 120]) {
      const bars = barsFor(bpm, d, false);
      const sec = (bars * 240) / bpm;
      t.ok(sec >= 10 - 1e-9 && sec <= 120 + 1e-9, `${bpm} bpm ${d}s → ${bars} bars = ${sec}s`);
      t.ok(sec > d - 240 / bpm, 'within one bar of the request');
      const minBars = Math.ceil(10 / (240 / bpm) - 1e-9);
      t.ok(sec <= d + 1e-9 || bars === minBars, `${bpm} bpm ${d}s: not longer than asked (${sec}s) unless the 10 s minimum forces it`);
    }
  }
  t.equal(barsFor(100, 33.3, false), 13, '13.875 bars asked → 13, not 14 (31.2 s, not 33.6 s)');
  t.equal(barsFor(120, 10, false), 5, 'exactly 5 bars stays 5');
  t.equal(barsFor(70, 10, false), 3, '10 s at 70 bpm: 2 bars (6.86 s) are too short, so 3 bars (10.29 s)');
  t.equal(barsFor(120, undefined, true), 8);
  t.equal(barsFor(200, undefined, true), 16);
  t.equal(barsFor(100, undefined, false), 50);
  const plan = planSong({ prompt: 'techno', seed: 2, loop: true });
  t.equal(plan.bars, 8);
  t.equal(plan.fadeSeconds, 0);
  t.equal(plan.totalSamples, Math.round(8 * (240 / plan.bpm) * 48000));
  t.ok(planSong({ prompt: 'techno', seed: 2, duration: 30 }).fadeSeconds > 0);
});

t.test('vocals are dropped from the plan and artists are refused with the name', async (t) => {
  const plan = planSong({ prompt: 'pop with male vocals and a choir', seed: 1 });
  t.ok(plan.droppedWords.length >= 2);
  t.notMatch(plan.cleanedPrompt, /vocals|choir/);
  t.throws(() => planSong({ prompt: 'in the style of Queen', seed: 1 }), ArtistRefusedError);
  try {
    planSong({ prompt: 'Daft Punk house', seed: 1 });
  } catch (e) {
    t.equal((e as ArtistRefusedError).artist, 'Daft Punk');
  }
});

t.test('the same seed gives the same plan; every genre plans without error', async (t) => {
  t.same(planSong({ prompt: 'jazz', seed: 9 }), planSong({ prompt: 'jazz', seed: 9 }));
  for (const g of ['lofi', 'hip hop', 'trap', 'house', 'techno', 'trance', 'dnb', 'dubstep', 'ambient', 'cinematic', 'rock', 'pop', 'jazz', 'synthwave', 'funk', 'reggae']) {
    for (const duration of [10, 45, 120]) t.doesNotThrow(() => planSong({ prompt: g, seed: 3, duration }), `${g} ${duration}`);
  }
});
