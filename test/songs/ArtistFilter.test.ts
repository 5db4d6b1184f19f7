import { readFileSync } from 'node:fs';
import t from 'tap';
import { ArtistFilter, ArtistRefusedError, normalizeWords } from '../../songs/ArtistFilter.ts';

const filter = ArtistFilter.fromDataFiles();

t.test('the artist list holds at least 2,000 distinct names and every common-word name is in it', async (t) => {
  t.ok(filter.size >= 2000, `size ${filter.size}`);
  const lines = (f: string) =>
    readFileSync(new URL(`../../songs/data/${f}`, import.meta.url), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  const all = new Set(lines('artists.txt').map((n) => normalizeWords(n).replace(/^the /, '')));
  for (const w of lines('artists-common-words.txt')) t.ok(all.has(normalizeWords(w).replace(/^the /, '')), w);
});

t.test('artist names are refused anywhere, whatever the case, accents or punctuation', async (t) => {
  const cases: [string, string][] = [
    ['a track like daft punk', 'Daft Punk'],
    ['BEYONCÉ inspired pop', 'Beyonce'],
    ['beyonce ballad', 'Beyonce'],
    ['make it sound like ke$ha', 'Kesha'],
    ['guns n roses riff', "Guns N' Roses"],
    ['r.e.m. jangle pop', 'R.E.M.'],
    ['some Sigur Ros atmosphere', 'Sigur Ros'],
    ['lofi beat, Nujabes', 'Nujabes'],
    ['the weeknd synth pop', 'The Weeknd'],
    ['Mozart piano sonata', 'Mozart'],
  ];
  for (const [prompt, artist] of cases) {
    const found = filter.find(prompt);
    t.ok(found.length > 0, prompt);
    t.equal(found[0]?.artist, artist, prompt);
    t.throws(() => filter.check(prompt), ArtistRefusedError);
  }
});

t.test('names that are ordinary words count only in reference phrases', async (t) => {
  const refused = ['in the style of Queen', 'sounds like Yes', 'a song by Genesis', 'inspired by Air', 'something like the Doors', 'Blur style britpop', 'Cream vibes', "Train's sound", 'similar to Muse'];
  for (const p of refused) t.ok(filter.find(p).length > 0, `refused: ${p}`);
  const allowed = [
    'yes, make it upbeat',
    'queen of the night ambient',
    'genesis of a new world, cinematic',
    'airy pads with open air feel',
    'a train journey at night',
    'ice cream truck melody',
    'blurred lo-fi memories',
    'like pink noise and future bass',
    'sounds like roots reggae',
    'detroit techno with acid bass',
    'motown soul groove',
    'pink noise wash',
    'sleigh bells and strings',
    '112 bpm house',
  ];
  for (const p of allowed) t.same(filter.find(p), [], `allowed: ${p}`);
});

t.test('ArtistRefusedError carries the artist', async (t) => {
  try {
    filter.check('like Taylor Swift');
    t.fail('should throw');
  } catch (e) {
    t.ok(e instanceof ArtistRefusedError);
    t.equal((e as ArtistRefusedError).artist, 'Taylor Swift');
  }
});
