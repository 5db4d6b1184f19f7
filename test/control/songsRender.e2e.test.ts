/**
 * Songs end to end (slow: renders real audio): POST /songs → the render worker renders both takes
 * in worker threads → GET shows done with takes → the stable URLs redirect (no key) to signed
 * links that serve files ffprobe accepts, and expire. A render abandoned mid-way (a crashed
 * worker) is picked up again when its lease runs out: nothing stays `rendering` forever.
 */
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pino from 'pino';
import t from 'tap';
import { RENDER_QUEUE, SongRenderWorker } from '../../songs/index.ts';
import { makeApp } from '../helpers/app.ts';
import { songServices, startRenderWorker } from '../helpers/songs.ts';

const run = promisify(execFile);

async function ffprobe(file: string) {
  const { stdout } = await run('ffprobe', ['-v', 'error', '-show_streams', '-show_format', '-of', 'json', file]);
  return JSON.parse(stdout) as { streams: Record<string, unknown>[]; format: Record<string, unknown> };
}

t.test('a song renders, downloads without a key through expiring signed links', { timeout: 240_000 }, async (t) => {
  let nowMs = Date.now();
  const now = () => nowMs;
  const { app, key, store, ctx, dataDir } = await makeApp(t, { now, services: (base) => songServices(base, { now }) });
  startRenderWorker(t, { store, blobs: ctx.blobs!, now });

  const auth = { authorization: `Bearer ${await key('pro')}` };
  const created = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'mellow lo-fi with rhodes', duration: 10, seed: 7, variations: 2 } });
  t.equal(created.statusCode, 202);
  const id = created.json().id as string;

  // Poll as a client would (the spec advises every 2 s; the test polls faster), bounded in time.
  let song = created.json();
  const seen = new Set<string>();
  const deadline = Date.now() + 200_000;
  while (song.status !== 'done' && song.status !== 'failed' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    song = (await app.inject({ method: 'GET', url: `/music/v1/songs/${id}`, headers: auth })).json();
    seen.add(song.status);
  }
  t.equal(song.status, 'done', `rendered (saw ${[...seen].join(', ')})`);
  t.ok(seen.has('rendering'), 'the rendering state was visible while it worked');
  t.equal(song.takes.length, 2);
  t.same(song.takes.map((x: { seed: number }) => x.seed), [7, 8], 'take n uses seed + n − 1');
  t.ok(song.finished_at);
  t.equal(song.progress, 1);
  for (const take of song.takes) {
    t.equal(take.waveform.length, 200);
    t.ok(take.waveform.every((v: number) => v >= 0 && v <= 1));
    t.ok(take.duration >= 10 && take.duration <= 120, 'whole bars within the limits');
  }

  const take = song.takes[0];
  for (const [url, ext] of [[take.mp3_url, 'mp3'], [take.wav_url, 'wav']] as const) {
    const path = new URL(url).pathname;
    const redirect = await app.inject({ method: 'GET', url: path });
    t.equal(redirect.statusCode, 302, `${ext}: stable URL redirects without a key`);
    const signed = new URL(redirect.headers.location as string);
    t.match(signed.search, /expires=\d+&signature=/);
    const file = await app.inject({ method: 'GET', url: signed.pathname + signed.search });
    t.equal(file.statusCode, 200, `${ext}: the signed link serves the file`);
    t.equal(file.headers['content-type'], ext === 'mp3' ? 'audio/mpeg' : 'audio/wav');
    const out = join(dataDir, `probe.${ext}`);
    writeFileSync(out, file.rawPayload);
    const probe = await ffprobe(out);
    const audio = probe.streams[0]!;
    t.equal(audio.codec_name, ext === 'mp3' ? 'mp3' : 'pcm_s16le');
    t.equal(audio.sample_rate, '48000');
    t.equal(audio.channels, 2);
    if (ext === 'mp3') t.equal(audio.bit_rate, '192000');

    const tampered = await app.inject({ method: 'GET', url: signed.pathname + signed.search.replace(/signature=(.)/, (_, c: string) => `signature=${c === 'A' ? 'B' : 'A'}`) });
    t.equal(tampered.statusCode, 403, `${ext}: a tampered link is refused`);
    t.equal(tampered.json().error, 'link_expired');
  }

  const path = new URL(take.mp3_url).pathname;
  const signed = new URL((await app.inject({ method: 'GET', url: path })).headers.location as string);
  nowMs += 11 * 60 * 1000;
  const expired = await app.inject({ method: 'GET', url: signed.pathname + signed.search });
  t.equal(expired.statusCode, 403, 'links expire');
  t.equal((await app.inject({ method: 'GET', url: `/music/v1/songs/${id}/3.mp3` })).statusCode, 404, 'no third take');
  t.equal((await app.inject({ method: 'GET', url: '/music/v1/songs/sng_nope/1.mp3' })).statusCode, 404);
});

t.test('a render abandoned by a crashed worker is rendered again once its lease runs out', { timeout: 240_000 }, async (t) => {
  let nowMs = Date.now();
  const now = () => nowMs;
  const { app, key, store, ctx } = await makeApp(t, { now, services: (base) => songServices(base, { now }) });
  const auth = { authorization: `Bearer ${await key('free')}` };
  const id = (await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'ambient drone', duration: 10, seed: 3 } })).json().id as string;

  // A worker leases the job, marks it rendering and dies before finishing (no ack, no retry).
  const lost = await store.queue.lease(RENDER_QUEUE, 30_000);
  t.equal((lost?.payload as { songId: string }).songId, id);
  await store.songs.update(id, { status: 'rendering', startedAt: new Date(nowMs).toISOString() });
  t.equal((await store.queue.lease(RENDER_QUEUE, 30_000)), null, 'while the lease holds, nobody else takes it');

  nowMs += 31_000;
  startRenderWorker(t, { store, blobs: ctx.blobs!, now });
  const deadline = Date.now() + 200_000;
  let song = await store.songs.get(id);
  while (song && song.status !== 'done' && song.status !== 'failed' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    song = await store.songs.get(id);
  }
  t.equal(song?.status, 'done', 'the second worker finished it');
  t.equal(song?.attempts, 2, 'counted as a second attempt');
  t.equal((await app.inject({ method: 'GET', url: '/music/v1/usage', headers: auth })).json().used, 1, 'counted once');
});

t.test('a song whose renders keep failing ends failed with its count given back', { timeout: 60_000 }, async (t) => {
  const now = Date.now;
  const { app, key, store, ctx } = await makeApp(t, { now, services: (base) => songServices(base, { now }) });
  const auth = { authorization: `Bearer ${await key('free')}` };
  const id = (await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'rock', duration: 10 } })).json().id as string;
  let calls = 0;
  // The engine seam fails (e.g. an encoder that is missing on this node); the worker retries, then gives up.
  const worker = new SongRenderWorker({
    store,
    blobs: ctx.blobs!,
    render: async () => {
      calls++;
      throw new Error('encoder missing');
    },
    logger: pino({ level: 'silent' }),
    now,
    retryDelayMs: 0,
    maxAttempts: 3,
  });
  t.teardown(() => worker.close());
  worker.start();
  const deadline = Date.now() + 30_000;
  let song = await store.songs.get(id);
  while (song?.status !== 'failed' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    song = await store.songs.get(id);
  }
  t.equal(song?.status, 'failed');
  t.equal(calls, 3, 'tried maxAttempts times');
  t.match(song?.error, { error: 'render_failed' });
  const body = (await app.inject({ method: 'GET', url: `/music/v1/songs/${id}`, headers: auth })).json();
  t.match(body.error, { error: 'render_failed', message: /encoder missing/ });
  t.equal((await app.inject({ method: 'GET', url: '/music/v1/usage', headers: auth })).json().used, 0, 'the count was given back');
});
