/**
 * A finished take's signed links (MP3, WAV, MIDI, stems zip, one stem) serve byte ranges over real
 * HTTP, as the clips' and recordings' links do: 206 with exactly the bytes asked and their
 * `Content-Range`, suffix and open ranges, several ranges answered with the whole file, 416 in the
 * Area A error shape past the end, HEAD without a body, `Accept-Ranges: bytes` on every answer. A
 * real player (headless Chromium's `<audio>`) seeks the MP3 to its middle and plays from there,
 * its requests answered 206.
 */
import t, { type Test } from 'tap';
import { makeApp } from '../helpers/app.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { songServices, startRenderWorker } from '../helpers/songs.ts';
import { until } from '../helpers/until.ts';

interface Take {
  mp3_url: string;
  wav_url: string;
  midi_url: string;
  stems_zip_url: string;
  stems: Record<string, string>;
}

/** A rendered take (10 s, with stems) served on a loopback port; `signed(url)` follows a stable URL's 302. */
async function renderedTake(t: Test) {
  const { app, key, store, ctx } = await makeApp(t, { services: songServices });
  startRenderWorker(t, { store, blobs: ctx.blobs! });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  const created = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'mellow lo-fi with rhodes', duration: 10, seed: 7, variations: 1, stems: true } });
  t.equal(created.statusCode, 202);
  const id = created.json().id as string;
  const song = await until(
    'the song renders',
    async () => (await app.inject({ method: 'GET', url: `/music/v1/songs/${id}`, headers: auth })).json() as { status: string; takes: Take[] },
    (s) => s.status === 'done' || s.status === 'failed',
    150_000,
    200,
  );
  t.equal(song.status, 'done', 'rendered');
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const origin = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const signed = async (stable: string) => {
    const res = await app.inject({ method: 'GET', url: new URL(stable).pathname });
    t.equal(res.statusCode, 302);
    const loc = new URL(res.headers.location as string);
    return `${origin}${loc.pathname}${loc.search}`;
  };
  return { take: song.takes[0]!, signed };
}

let rendered: Awaited<ReturnType<typeof renderedTake>>;
t.before(async () => {
  rendered = await renderedTake(t);
});

t.test('every signed take file serves byte ranges', { timeout: 120_000 }, async (t) => {
  const { take, signed } = rendered;
  const files: [string, string][] = [
    ['mp3', take.mp3_url],
    ['wav', take.wav_url],
    ['mid', take.midi_url],
    ['stems.zip', take.stems_zip_url],
    ['drums stem', take.stems['drums']!],
    ['effects stem', take.stems['effects']!],
  ];
  for (const [what, stable] of files) {
    const url = await signed(stable);
    const whole = await fetch(url);
    t.equal(whole.status, 200, `${what}: 200 without Range`);
    t.equal(whole.headers.get('accept-ranges'), 'bytes', `${what}: says it serves ranges`);
    const bytes = Buffer.from(await whole.arrayBuffer());
    const size = bytes.length;
    t.equal(whole.headers.get('content-length'), String(size));
    t.ok(size > 600, `${what}: ${size} bytes`);

    const cases: [string, number, number][] = [
      ['bytes=100-199', 100, 199],
      ['bytes=-500', size - 500, size - 1],
      ['bytes=100-', 100, size - 1],
      [`bytes=${size - 10}-${size + 1000}`, size - 10, size - 1],
      ['bytes=0-0', 0, 0],
    ];
    for (const [range, start, end] of cases) {
      const res = await fetch(url, { headers: { range } });
      t.equal(res.status, 206, `${what} ${range}: 206`);
      t.equal(res.headers.get('content-range'), `bytes ${start}-${end}/${size}`, `${what} ${range}: Content-Range`);
      t.equal(res.headers.get('content-length'), String(end - start + 1));
      t.equal(res.headers.get('accept-ranges'), 'bytes');
      t.ok(Buffer.from(await res.arrayBuffer()).equals(bytes.subarray(start, end + 1)), `${what} ${range}: exactly those bytes`);
    }

    const multi = await fetch(url, { headers: { range: 'bytes=0-9,100-109' } });
    t.equal(multi.status, 200, `${what}: several ranges answer the whole file`);
    t.ok(Buffer.from(await multi.arrayBuffer()).equals(bytes));

    for (const range of [`bytes=${size}-`, `bytes=${size + 5}-${size + 10}`, 'bytes=-0']) {
      const res = await fetch(url, { headers: { range } });
      t.equal(res.status, 416, `${what} ${range}: 416`);
      t.equal(res.headers.get('content-range'), `bytes */${size}`, `${what} ${range}: Content-Range names the size`);
      const body = (await res.json()) as { error: string; message: string };
      t.equal(body.error, 'range_not_satisfiable', `${what} ${range}: the Area A error shape`);
      t.match(body.message, range, 'the message names the range');
    }

    const head = await fetch(url, { method: 'HEAD' });
    t.equal(head.status, 200, `${what}: HEAD`);
    t.equal(head.headers.get('content-length'), String(size), `${what}: HEAD gives the length`);
    t.equal(head.headers.get('accept-ranges'), 'bytes');
    t.equal((await head.arrayBuffer()).byteLength, 0, 'and no body');
    const headRange = await fetch(url, { method: 'HEAD', headers: { range: 'bytes=100-199' } });
    t.equal(headRange.status, 206, `${what}: HEAD with a range`);
    t.equal(headRange.headers.get('content-range'), `bytes 100-199/${size}`);
  }
});

t.test('a browser <audio> seeks the signed MP3 to its middle and plays from there', { timeout: 120_000 }, async (t) => {
  const { take, signed } = rendered;
  const url = await signed(take.mp3_url);
  const context = await launchChromium(t, { fakeMedia: false });
  const page = await context.newPage();
  const log: { range: string | null; status: number; contentRange: string | null }[] = [];
  page.on('response', (res) => {
    if (!res.url().startsWith(url.split('?')[0]!)) return;
    log.push({ range: res.request().headers()['range'] ?? null, status: res.status(), contentRange: res.headers()['content-range'] ?? null });
  });
  // Sent as source text: the test's TypeScript transform would wrap named functions in a helper the page lacks.
  const played = (await page.evaluate(`(async (src) => {
    const audio = document.createElement('audio');
    audio.preload = 'auto';
    audio.muted = true;
    document.body.append(audio);
    const event = (name) =>
      new Promise((resolve, reject) => {
        audio.addEventListener(name, () => resolve(), { once: true });
        audio.addEventListener('error', () => reject(new Error('media error ' + (audio.error ? audio.error.code : '?'))), { once: true });
      });
    const loaded = event('loadedmetadata');
    audio.src = src;
    await loaded;
    const mid = audio.duration / 2;
    const seekable = audio.seekable.length > 0 ? audio.seekable.end(audio.seekable.length - 1) : 0;
    const seeked = event('seeked');
    audio.currentTime = mid;
    await seeked;
    const at = audio.currentTime;
    await audio.play();
    // Bounded: 10 s of waiting for half a second of playback.
    const deadline = performance.now() + 10000;
    while (audio.currentTime < at + 0.5 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const now = audio.currentTime;
    audio.pause();
    return { duration: audio.duration, mid, seekable, at, now };
  })(${JSON.stringify(url)})`)) as { duration: number; mid: number; seekable: number; at: number; now: number };
  t.ok(played.duration > 9, `the MP3 lasts ${played.duration.toFixed(2)} s`);
  t.ok(played.seekable >= played.duration - 0.1, `the whole of it is seekable (to ${played.seekable.toFixed(2)} s)`);
  t.ok(Math.abs(played.at - played.mid) < 0.1, `the seek landed in the middle (${played.at.toFixed(2)} s)`);
  t.ok(played.now >= played.at + 0.5 && played.now < played.at + 5, `it played on from there (${played.at.toFixed(2)} → ${played.now.toFixed(2)} s)`);
  const ranged = log.filter((r) => r.range !== null);
  t.ok(ranged.length > 0, `the player asked for ranges (${JSON.stringify(log)})`);
  t.ok(
    ranged.every((r) => r.status === 206 && /^bytes \d+-\d+\/\d+$/.test(r.contentRange ?? '')),
    'every range it asked for was answered 206 with a Content-Range',
  );
});
