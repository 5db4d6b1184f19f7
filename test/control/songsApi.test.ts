/**
 * Area A route contracts (spec "Area A: song generation"): create/list/get/usage, field
 * validation naming the field, artist refusal, the 3-active limit (429), monthly quotas (402)
 * under parallel requests, scoping to the account, positions.
 */
import t from 'tap';
import { makeApp } from '../helpers/app.ts';
import { songServices } from '../helpers/songs.ts';

const json = { 'content-type': 'application/json' };

t.test('POST /songs queues a song and returns the Song record with its position', async (t) => {
  // The clock steps a second before the second song so "newest first" cannot tie on a millisecond.
  let clock = Date.now();
  const { app, key } = await makeApp(t, { services: songServices, now: () => clock });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'chill lo-fi hip hop with vinyl crackle', seed: 42, variations: 2 } });
  t.equal(res.statusCode, 202);
  const song = res.json();
  t.match(song, { status: 'queued', position: 1, prompt: 'chill lo-fi hip hop with vinyl crackle', seed: 42, variations: 2, loop: false, duration: 120, takes: [], finished_at: null, error: null, key: null });
  t.match(song.id, /^sng_/);
  t.ok(Number.isInteger(song.bpm) && song.bpm >= 60 && song.bpm <= 200, 'bpm resolved from the genre');
  t.ok(!Number.isNaN(Date.parse(song.created_at)));

  clock += 1000;
  const second = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'uptempo house at 124 bpm in F# minor' } });
  t.equal(second.json().position, 2, 'second in line');
  t.equal(second.json().bpm, 124, 'a tempo named in the words wins');
  t.equal(second.json().key, 'F# minor', 'a key named in the words is echoed');

  const got = await app.inject({ method: 'GET', url: `/music/v1/songs/${song.id}`, headers: auth });
  t.equal(got.statusCode, 200);
  t.equal(got.json().position, 1);

  const list = await app.inject({ method: 'GET', url: '/music/v1/songs?limit=1', headers: auth });
  t.equal(list.statusCode, 200);
  t.equal(list.json().songs.length, 1);
  t.equal(list.json().songs[0].id, second.json().id, 'newest first');
  t.type(list.json().next_cursor, 'string');
  const page2 = await app.inject({ method: 'GET', url: `/music/v1/songs?limit=1&cursor=${encodeURIComponent(list.json().next_cursor)}`, headers: auth });
  t.equal(page2.json().songs[0].id, song.id);
  t.equal(page2.json().next_cursor, null, 'last page');
});

t.test('every invalid field is a 400 whose message names the field', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  const cases: [Record<string, unknown>, string][] = [
    [{}, 'prompt'],
    [{ prompt: '' }, 'prompt'],
    [{ prompt: 'x'.repeat(401) }, 'prompt'],
    [{ prompt: 'ok', duration: 9 }, 'duration'],
    [{ prompt: 'ok', duration: 121 }, 'duration'],
    [{ prompt: 'ok', bpm: 59 }, 'bpm'],
    [{ prompt: 'ok', bpm: 120.5 }, 'bpm'],
    [{ prompt: 'ok', key: 'H major' }, 'key'],
    [{ prompt: 'ok', key: 'C dorian' }, 'key'],
    [{ prompt: 'ok', seed: -1 }, 'seed'],
    [{ prompt: 'ok', seed: 2147483648 }, 'seed'],
    [{ prompt: 'ok', variations: 3 }, 'variations'],
    [{ prompt: 'ok', loop: 'yes' }, 'loop'],
    [{ prompt: 'ok', colour: 'blue' }, 'colour'],
  ];
  for (const [payload, field] of cases) {
    const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload });
    t.equal(res.statusCode, 400, `${JSON.stringify(payload)} is refused`);
    t.equal(res.json().error, 'invalid_request');
    t.match(res.json().message, field, `message names ${field}`);
  }
  for (const songKey of ['C major', 'c# minor', 'Db major', 'F♯ minor', 'Bb minor']) {
    const fresh = { authorization: `Bearer ${await key('pro')}` };
    const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: fresh, payload: { prompt: 'ambient pads', key: songKey } });
    t.equal(res.statusCode, 202, `${songKey} is accepted`);
  }
});

t.test('a prompt naming an artist is refused with 422 naming the artist; vocals words are dropped', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'a synthwave track like Daft Punk' } });
  t.equal(res.statusCode, 422);
  t.equal(res.json().error, 'prompt_refused');
  t.match(res.json().message, /Daft Punk/i);
  const ok = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'pop song with female vocals and a catchy chorus' } });
  t.equal(ok.statusCode, 202, 'vocal words do not fail the request');
  t.equal(ok.json().prompt, 'pop song with female vocals and a catchy chorus', 'the record keeps the prompt as given');
});

t.test('at most 3 songs in line per account: the 4th is 429; other accounts are unaffected', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const a = { authorization: `Bearer ${await key('pro')}` };
  const b = { authorization: `Bearer ${await key('pro')}` };
  const results = await Promise.all(Array.from({ length: 8 }, () => app.inject({ method: 'POST', url: '/music/v1/songs', headers: a, payload: { prompt: 'techno' } })));
  const codes = results.map((r) => r.statusCode).sort();
  t.same(codes, [202, 202, 202, 429, 429, 429, 429, 429], 'exactly 3 accepted under parallel creates');
  const refused = results.find((r) => r.statusCode === 429)!;
  t.equal(refused.json().error, 'too_many_active');
  t.ok(refused.headers['retry-after']);
  const other = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: b, payload: { prompt: 'jazz' } });
  t.equal(other.statusCode, 202);
  t.equal(other.json().position, 4, 'positions are global: 1 is next');
});

t.test('monthly quota: parallel creates never exceed it; 402 carries limit, used, plan, upgrade_url; a failed song gives its count back', async (t) => {
  let nowMs = Date.parse('2026-11-20T10:00:00Z');
  const { app, key, store } = await makeApp(t, { now: () => nowMs, services: (base) => songServices(base, { now: () => nowMs }) });
  const auth = { authorization: `Bearer ${await key('free')}` };
  // Free plan: 10 a month. Render nothing; mark songs done in the store to free the 3 active slots.
  const accepted: string[] = [];
  for (let round = 0; round < 6; round++) {
    const batch = await Promise.all(Array.from({ length: 3 }, () => app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'ambient' } })));
    for (const r of batch) if (r.statusCode === 202) accepted.push(r.json().id);
    for (const id of accepted) await store.songs.update(id, { status: 'done', finishedAt: new Date(nowMs).toISOString() });
  }
  t.equal(accepted.length, 10, 'exactly the monthly 10 were accepted');
  const over = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'ambient' } });
  t.equal(over.statusCode, 402);
  t.match(over.json(), { error: 'quota_exceeded', limit: 10, used: 10, plan: 'free' });
  t.match(over.json().upgrade_url, /^https?:\/\//);

  let usage = (await app.inject({ method: 'GET', url: '/music/v1/usage', headers: auth })).json();
  t.same(usage, { plan: 'free', limit: 10, used: 10, resets_at: '2026-12-01T00:00:00.000Z' });

  await store.songs.fail(accepted[0]!, { error: 'render_failed', message: 'boom' }, new Date(nowMs).toISOString());
  usage = (await app.inject({ method: 'GET', url: '/music/v1/usage', headers: auth })).json();
  t.equal(usage.used, 9, 'the failed song was given back');
  const again = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'ambient' } });
  t.equal(again.statusCode, 202, 'and can be used again');

  nowMs = Date.parse('2026-12-01T00:00:01Z');
  usage = (await app.inject({ method: 'GET', url: '/music/v1/usage', headers: auth })).json();
  t.same(usage, { plan: 'free', limit: 10, used: 0, resets_at: '2027-01-01T00:00:00.000Z' }, 'resets on the 1st, UTC');
});

t.test('unlimited plans report limit null; another account\'s song is 404', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const a = { authorization: `Bearer ${await key('max')}` };
  const b = { authorization: `Bearer ${await key('free')}` };
  t.match((await app.inject({ method: 'GET', url: '/music/v1/usage', headers: a })).json(), { plan: 'max', limit: null, used: 0 });
  const song = (await app.inject({ method: 'POST', url: '/music/v1/songs', headers: a, payload: { prompt: 'rock' } })).json();
  const res = await app.inject({ method: 'GET', url: `/music/v1/songs/${song.id}`, headers: b });
  t.equal(res.statusCode, 404);
  t.equal(res.json().error, 'not_found');
});

t.test('503 when no renderer can take work', async (t) => {
  const { app, key } = await makeApp(t, { services: (base) => songServices(base, { canRender: async () => false }) });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: { ...auth, ...json }, payload: JSON.stringify({ prompt: 'pop' }) });
  t.equal(res.statusCode, 503);
  t.equal(res.json().error, 'generator_unavailable');
  t.equal((await app.inject({ method: 'GET', url: '/music/v1/usage', headers: auth })).json().used, 0, 'nothing was counted');
});
