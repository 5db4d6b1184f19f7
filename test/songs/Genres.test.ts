import { readFileSync } from 'node:fs';
import t from 'tap';
import { GENRES } from '../../songs/Genres.ts';
import { parseRoman } from '../../songs/Harmony.ts';

t.test('at least 12 genres, each with a tempo inside 60–200 and parseable progressions', async (t) => {
  t.ok(GENRES.length >= 12);
  for (const g of GENRES) {
    t.ok(g.bpm.min <= g.bpm.usual && g.bpm.usual <= g.bpm.max && g.bpm.min >= 60 && g.bpm.max <= 200, g.id);
    for (const p of [...g.progressions.major, ...g.progressions.minor]) for (const c of p) t.doesNotThrow(() => parseRoman(c), `${g.id} ${c}`);
  }
});

t.test('docs/songs.md lists every genre of the table', async (t) => {
  const doc = readFileSync(new URL('../../docs/songs.md', import.meta.url), 'utf8');
  for (const g of GENRES) t.ok(doc.includes(`| ${g.name} |`), g.name);
});
