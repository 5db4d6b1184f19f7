/**
 * Audio while it renders: on the songs page a take's MP3 starts playing in Chromium while the song
 * is still rendering (fetched from the take's stable URL as LAME writes it), and a progressive
 * download of that URL ends with exactly the bytes of the finished MP3 (a `Range` asked of the
 * growing file is ignored, `Accept-Ranges: none`: its length is not known yet).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { loadConfig } from '../../control/config.ts';
import { startServer } from '../../control/Server.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { freePort } from '../helpers/net.ts';

t.test('a take plays before the render finishes; the progressive download equals the finished MP3', { timeout: 300_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-songs-progressive-'));
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: await freePort(), LOG_LEVEL: 'silent', ROLES: 'api,worker', RENDER_WORKERS: 1 });
  const server = await startServer(config, { logger: pino({ level: 'silent' }) });
  t.teardown(async () => {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const { key } = await createAccountWithKey(server.store, 'pro');
  const auth = { authorization: `Bearer ${key}` };
  const getSong = async (id: string) => (await fetch(`${server.url}/music/v1/songs/${id}`, { headers: auth })).json() as Promise<Record<string, unknown>>;

  const context = await launchChromium(t, { fakeMedia: false });
  const page = await context.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await page.goto(`${server.url}/web/songs.html`);
  await page.fill('#key', key);
  await page.fill('#prompt', 'uplifting trance with supersaw chords and an arp');
  await page.fill('#duration', '120');
  await page.selectOption('#variations', '2');
  await page.click('#go');

  // The test's own client: follows the record closely and starts a download as soon as take 1 can be fetched.
  await page.waitForSelector('#state[data-status]');
  const { songs } = (await (await fetch(`${server.url}/music/v1/songs?limit=1`, { headers: auth })).json()) as { songs: { id: string }[] };
  const id = songs[0]!.id;
  let song = await getSong(id);
  const deadline = Date.now() + 200_000;
  while ((song.streaming_mp3_urls as string[] | undefined)?.length === 0 && song.status !== 'done' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
    song = await getSong(id);
  }
  t.equal(song.status, 'rendering', 'take 1 can be fetched while the song renders');
  const url = (song.streaming_mp3_urls as string[])[0]!;
  t.match(url, /\/songs\/sng_[^/]+\/1\.mp3$/, 'from the stable URL');
  const download = fetch(url, { headers: { range: 'bytes=100-199' } }).then(async (res) => ({
    status: res.status,
    acceptRanges: res.headers.get('accept-ranges'),
    bytes: Buffer.from(await res.arrayBuffer()),
    at: Date.now(),
  }));

  // Chromium: the page's player starts while the song is still rendering.
  await page.waitForSelector('audio.live[data-playing="true"]', { timeout: 120_000 });
  const whenPlaying = await getSong(id);
  t.equal(whenPlaying.status, 'rendering', 'playback started before the render finished');
  const position = await page.$eval('audio.live', (el) => (el as HTMLAudioElement).currentTime);
  t.ok(position >= 0, `playing at ${position.toFixed(2)} s`);

  while (song.status !== 'done' && song.status !== 'failed' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    song = await getSong(id);
  }
  t.equal(song.status, 'done');
  const got = await download;
  t.equal(got.status, 200, 'a range of the growing file answers the whole file');
  t.equal(got.acceptRanges, 'none', 'and tells players not to seek it');
  const finished = Buffer.from(await (await fetch((song.takes as { mp3_url: string }[])[0]!.mp3_url)).arrayBuffer());
  t.ok(finished.length > 100_000, `finished MP3 ${finished.length} bytes`);
  t.ok(got.bytes.equals(finished), `progressive download (${got.bytes.length} bytes) is byte-identical to the finished MP3`);
  await page.waitForSelector('#state[data-status="done"]', { timeout: 30_000 });
  t.equal(await page.$eval('.take audio', (el) => el.classList.contains('live')), true, 'the playing element moved into take 1, not restarted');
  t.same(pageErrors, [], 'no script errors');
});
