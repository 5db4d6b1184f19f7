import t from 'tap';
import { foldBpm, parsePrompt } from '../../songs/PromptParser.ts';

t.test('genres are recognised from their aliases; the first one named wins', async (t) => {
  const cases: [string, string][] = [
    ['chill lo-fi beat', 'lofi'], ['boom bap hip-hop', 'hiphop'], ['deep house groove', 'house'], ['berlin techno', 'techno'],
    ['uplifting trance anthem', 'trance'], ['liquid drum & bass', 'dnb'], ['dnb roller', 'dnb'], ['dubstep wobble', 'dubstep'],
    ['ambient drone for sleep', 'ambient'], ['epic orchestral trailer', 'cinematic'], ['indie rock with guitars', 'rock'],
    ['catchy pop song', 'pop'], ['smooth jazz lounge', 'jazz'], ['retrowave night drive', 'synthwave'], ['funky disco', 'funk'],
    ['roots reggae', 'reggae'], ['dark trap beat', 'trap'], ['techno and then house', 'techno'], ['80s rock', 'rock'], ['80s', 'synthwave'],
  ];
  for (const [p, g] of cases) t.equal(parsePrompt(p).genre, g, p);
  t.equal(parsePrompt('a nice tune').genre, null);
});

t.test('tempo numbers and words are read', async (t) => {
  t.equal(parsePrompt('house at 126 bpm').bpm, 126);
  t.equal(parsePrompt('128bpm techno').bpm, 128);
  t.equal(parsePrompt('90 beats per minute').bpm, 90);
  t.equal(parsePrompt('300 bpm gabber').bpm, 150);
  t.equal(parsePrompt('40bpm drone').bpm, 80);
  t.equal(parsePrompt('slow piano').tempoWord, 'slow');
  t.equal(parsePrompt('uptempo pop').tempoWord, 'fast');
  t.equal(parsePrompt('very slow ambient').tempoWord, 'veryslow');
  t.equal(parsePrompt('mid-tempo groove').tempoWord, 'mid');
  t.equal(parsePrompt('piano').tempoWord, null);
  t.equal(foldBpm(250), 125);
});

t.test('keys and modes are read from words', async (t) => {
  t.equal(parsePrompt('sad piano in F# minor').key?.name, 'F# minor');
  t.equal(parsePrompt('in the key of Eb major, jazz').key?.name, 'Eb major');
  t.equal(parsePrompt('house in a minor').key?.name, 'A minor');
  t.equal(parsePrompt('Dm trap beat').key?.name, 'D minor');
  t.equal(parsePrompt('something in a minor key').key, null);
  t.equal(parsePrompt('something in a minor key').mode, 'minor');
  t.equal(parsePrompt('fm synth bells').key, null);
  t.equal(parsePrompt('a major vibe').key, null);
});

t.test('words asking for vocals are dropped; structure words and voice-named instruments stay', async (t) => {
  const p = parsePrompt('pop song with female vocals, catchy chorus and verse, a rapper, lyrics about summer, tenor sax solo, choir');
  t.ok(p.dropped.some((d) => /vocals/i.test(d)));
  t.ok(p.dropped.includes('rapper'));
  t.ok(p.dropped.includes('lyrics'));
  t.ok(p.dropped.includes('choir'));
  t.match(p.cleaned, /chorus/);
  t.match(p.cleaned, /verse/);
  t.match(p.cleaned, /tenor sax/);
  t.notMatch(p.cleaned, /vocals|rapper|lyrics|choir/i);
  t.equal(p.instruments.lead, 'sax');
  const q = parsePrompt('ballad with "walking down the street in the summer rain tonight" sung by a tenor');
  t.notMatch(q.cleaned, /walking down the street/);
  t.notMatch(q.cleaned, /\btenor\b/);
});

t.test('instrument words choose patches and moods set energy', async (t) => {
  const p = parsePrompt('relaxing rhodes and 808 with arpeggios, no drums');
  t.equal(p.instruments.chords, 'epiano');
  t.equal(p.instruments.bass, 'bass808');
  t.equal(p.arp, true);
  t.equal(p.drums, false);
  t.ok((p.energy ?? 1) < 0.4);
  t.ok(parsePrompt('intense aggressive').energy! > 0.8);
  t.ok(parsePrompt('dark and eerie').moods.includes('dark'));
});
