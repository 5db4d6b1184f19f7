import t from 'tap';
import { ALL_KEYS, parseKey, parseMusicalKey } from '../../songs/Keys.ts';

t.test('parseKey accepts all 24 keys in their default spelling and returns them unchanged', async (t) => {
  t.equal(ALL_KEYS.length, 24);
  for (const k of ALL_KEYS) t.equal(parseKey(k), k, k);
});

t.test('parseKey normalises case, symbols and spelled-out accidentals', async (t) => {
  t.equal(parseKey('c# minor'), 'C# minor');
  t.equal(parseKey('Db major'), 'Db major');
  t.equal(parseKey('C♯ Minor'), 'C# minor');
  t.equal(parseKey('E♭ major'), 'Eb major');
  t.equal(parseKey('f sharp minor'), 'F# minor');
  t.equal(parseKey('B flat major'), 'Bb major');
  t.equal(parseKey('Bbm'), 'Bb minor');
  t.equal(parseKey('Am'), 'A minor');
  t.equal(parseKey('G'), 'G major');
  t.equal(parseKey('  a   MINOR '), 'A minor');
});

t.test('enharmonic spellings name the same pitch class', async (t) => {
  const pairs: [string, string][] = [['C# major', 'Db major'], ['F# major', 'Gb major'], ['G# minor', 'Ab minor'], ['D# minor', 'Eb minor'], ['A# minor', 'Bb minor'], ['B major', 'Cb major'], ['E# minor', 'F minor']];
  for (const [a, b] of pairs) {
    const x = parseMusicalKey(a);
    const y = parseMusicalKey(b);
    t.ok(x && y, `${a} / ${b} parse`);
    t.equal(x?.tonic, y?.tonic, `${a} = ${b}`);
    t.equal(x?.mode, y?.mode);
  }
});

t.test('parseKey rejects things that are not keys', async (t) => {
  for (const bad of ['', 'H major', 'C dorian', 'minor', 'C## major', 'C major please', 'x'.repeat(100), '12']) t.equal(parseKey(bad), null, JSON.stringify(bad));
});
