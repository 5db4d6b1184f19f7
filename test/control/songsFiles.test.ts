/**
 * Area A additions and fixes: a loop without duration is 8 bars (not 120 s); downloads answer
 * 302 or 404 only and are documented as their own operations (getSongMp3, getSongWav, with an
 * integer take number); `sections` and `stems` on create are validated, echoed and planned.
 */
import t from 'tap';
import { makeApp } from '../helpers/app.ts';
import { songServices } from '../helpers/songs.ts';

t.test('loop: true without duration plans 8 bars and the record says so', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'techno loop', bpm: 120, loop: true, seed: 3 } });
  t.equal(res.statusCode, 202);
  t.equal(res.json().duration, 16, '8 bars at 120 bpm = 16 s, not the 120 s default');
  t.equal(res.json().sections.reduce((s: number, x: { bars: number }) => s + x.bars, 0), 8, 'the plan holds 8 bars');
  const plain = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'techno', bpm: 120, seed: 3 } });
  t.equal(plain.json().duration, 120, 'without loop the default stays 120 s');
  t.equal(plain.json().sections.reduce((s: number, x: { bars: number }) => s + x.bars, 0), 60);
});

t.test('downloads answer 404 for any unknown file, never 400', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  const id = (await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'ambient', duration: 10 } })).json().id as string;
  for (const file of ['1.ogg', '3.mp3', '0.wav', 'x.mp3', '1.5.wav', '1.mid', '1/stems.zip', '1/stems/drums.wav', '1/stems/vocals.wav', '2.mp3', '1.mp3']) {
    const res = await app.inject({ method: 'GET', url: `/music/v1/songs/${id}/${file}` });
    t.equal(res.statusCode, 404, `${file} → 404`);
    t.equal(res.json().error, 'file_not_found', file);
  }
});

t.test('OpenAPI documents getSongMp3 and getSongWav as operations with n an integer 1–2', async (t) => {
  const { app } = await makeApp(t, { services: songServices });
  const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json();
  const ops: Record<string, string> = {
    '/music/v1/songs/{id}/{n}.mp3': 'getSongMp3',
    '/music/v1/songs/{id}/{n}.wav': 'getSongWav',
    '/music/v1/songs/{id}/{n}.mid': 'getSongMidi',
    '/music/v1/songs/{id}/{n}/stems.zip': 'getSongStemsZip',
    '/music/v1/songs/{id}/{n}/stems/{stem}.wav': 'getSongStem',
  };
  for (const [path, op] of Object.entries(ops)) {
    const get = doc.paths[path]?.get;
    t.equal(get?.operationId, op, `${path} is ${op}`);
    const n = get?.parameters?.find((p: { name: string }) => p.name === 'n');
    t.equal(n?.in, 'path');
    t.equal(n?.schema?.type, 'integer', `${op}: n is an integer`);
    t.equal(n?.schema?.minimum, 1);
    t.equal(n?.schema?.maximum, 2);
    t.same(Object.keys(get.responses).sort(), ['302', '404'], `${op} answers 302 or 404 only`);
  }
  t.notOk(doc.paths['/music/v1/songs/{id}/{file}'], 'no free-form file operation');
  t.ok(doc.components.schemas.Take.properties.midi_url, 'Take documents midi_url');
  t.ok(doc.components.schemas.Take.properties.stems, 'Take documents stems');
});

t.test('sections are validated naming the field, echoed with start bars, and set the length', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  const bad: [unknown, RegExp][] = [
    [[], /sections/],
    [[{ name: 'solo', bars: 4, energy: 0.5 }], /sections\[0\]\.name/],
    [[{ name: 'verse', bars: 0, energy: 0.5 }], /sections\[0\]\.bars/],
    [[{ name: 'verse', bars: 4.5, energy: 0.5 }], /sections\[0\]\.bars/],
    [[{ name: 'verse', bars: 4, energy: 2 }], /sections\[0\]\.energy/],
    [[{ name: 'verse', bars: 4 }], /sections\[0\]\.energy/],
    [[{ name: 'verse', bars: 4, energy: 0.5, mood: 'x' }], /sections\[0\]/],
    [[{ name: 'verse', bars: 2, energy: 0.5 }], /sections: must last 10 to 120 seconds/],
    [[{ name: 'verse', bars: 64, energy: 0.5 }, { name: 'chorus', bars: 64, energy: 0.9 }], /sections: must last 10 to 120 seconds/],
  ];
  for (const [sections, re] of bad) {
    const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'pop', bpm: 120, sections } });
    t.equal(res.statusCode, 400, JSON.stringify(sections));
    t.match(res.json().message, re);
  }
  const both = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'pop', duration: 30, sections: [{ name: 'verse', bars: 8, energy: 0.5 }] } });
  t.equal(both.statusCode, 400);
  t.match(both.json().message, /^sections: give either duration or sections/);
  const artist = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'pop', sections: [{ name: 'verse', bars: 8, energy: 0.5, style: 'in the style of Taylor Swift' }] } });
  t.equal(artist.statusCode, 422, 'artist names in section style words are refused too');

  const asked = [
    { name: 'intro', bars: 2, energy: 0.2 },
    { name: 'verse', bars: 4, energy: 0.5, style: 'sparse' },
    { name: 'chorus', bars: 4, energy: 0.9, style: 'full, with arp' },
    { name: 'outro', bars: 2, energy: 0.3 },
  ];
  const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'synth pop', bpm: 120, seed: 5, stems: true, sections: asked } });
  t.equal(res.statusCode, 202);
  const song = res.json();
  t.equal(song.stems, true);
  t.equal(song.duration, 24, '12 bars at 120 bpm');
  t.same(
    song.sections,
    [
      { name: 'intro', start_bar: 0, bars: 2, energy: 0.2, style: '' },
      { name: 'verse', start_bar: 2, bars: 4, energy: 0.5, style: 'sparse' },
      { name: 'chorus', start_bar: 6, bars: 4, energy: 0.9, style: 'full, with arp' },
      { name: 'outro', start_bar: 10, bars: 2, energy: 0.3, style: '' },
    ],
  );
  const plain = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'synth pop', bpm: 120, seed: 5, duration: 24 } });
  t.equal(plain.json().stems, false, 'stems are opt-in');
  t.ok(plain.json().sections.length >= 2, 'without sections the engine plan is shown');
});
