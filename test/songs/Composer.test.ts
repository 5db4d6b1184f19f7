/**
 * Section-local randomness: the notes of a section come from its own random streams, so a client
 * can re-render a song with one section changed (same seed) and keep every other section's notes.
 */
import t from 'tap';
import { compose, type Score } from '../../songs/Composer.ts';
import { planSong } from '../../songs/SongPlanner.ts';

type Asked = NonNullable<Parameters<typeof planSong>[0]['sections']>;

/** Notes and hits starting in bars [from, to), as comparable strings (part, start, pitch, length, velocity). */
function notesIn(score: Score, spbar: number, from: number, to: number): string[] {
  const inside = (start: number) => start >= from * spbar && start < to * spbar;
  const out: string[] = [];
  for (const p of score.parts) for (const n of p.notes) if (inside(n.start)) out.push(`${p.role} ${n.start} ${n.pitch} ${n.length} ${n.vel.toFixed(6)}`);
  for (const h of score.drums) if (inside(h.start)) out.push(`drum ${h.kind} ${h.start} ${h.vel.toFixed(6)}`);
  return out.sort();
}

t.test('changing one asked section keeps the notes of the others (same seed, both takes)', async (t) => {
  const base: Asked = [
    { name: 'verse', bars: 4, energy: 0.5 },
    { name: 'chorus', bars: 4, energy: 0.8 },
    { name: 'bridge', bars: 4, energy: 0.4 },
  ];
  const edited: Asked = [base[0]!, { name: 'chorus', bars: 4, energy: 0.3, style: 'sparse, with arp' }, base[2]!];
  for (const prompt of ['house with a pluck lead and arps', 'jazz trio with walking bass', 'trap beat with 808 slides']) {
    const a = planSong({ prompt, seed: 77, bpm: 120, sections: base });
    const b = planSong({ prompt, seed: 77, bpm: 120, sections: edited });
    const spbar = (a.totalSamples / a.bars) | 0;
    for (const n of [1, 2]) {
      const sa = compose(a, n);
      const sb = compose(b, n);
      // Bars next to the edited section are left out: held notes may tie across a section edge.
      const firstA = notesIn(sa, spbar, 0, 3);
      t.ok(firstA.length > 10, `${prompt}, take ${n}: the first section has notes`);
      t.same(notesIn(sb, spbar, 0, 3), firstA, `${prompt}, take ${n}: first section unchanged`);
      t.same(notesIn(sb, spbar, 9, 12), notesIn(sa, spbar, 9, 12), `${prompt}, take ${n}: last section unchanged`);
      t.notSame(notesIn(sb, spbar, 4, 8), notesIn(sa, spbar, 4, 8), `${prompt}, take ${n}: the edited section changed`);
    }
  }
});
