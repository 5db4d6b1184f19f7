/**
 * The playground's soundtrack card, driven in headless Chromium (fake camera and microphone)
 * against the real server (api, media node and song renderer in one process): a user picks one of
 * their rendered songs, plays it as the stream's soundtrack, watches its beat run at the song's
 * tempo in step with where the node says the take is, maps the song's loudness to `delta` and
 * sees the feature and the value it gives, has a mapping the server refuses explained, and stops
 * the song. What the page shows is checked against the API's own answers.
 */
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import t from 'tap';
import { launchChromium } from '../helpers/chromium.ts';
import { startLiveServer } from '../helpers/liveServer.ts';
import { until } from '../helpers/until.ts';

const ARTIFACTS = join(import.meta.dirname, '..', 'artifacts');
const BPM = 120;

interface Shown {
  soundtrack: { song_id: string; state: string; position_s: number; duration_s: number; start_at: number } | null;
  beat: { beat: number; bar: number; beatInBar: number; at: number } | null;
  mapping: { source: string; feature: string; param: string; feature_value: number | null; value: number | null } | null;
}

const shown = (page: Page) => page.evaluate(() => (window as unknown as { playground: Shown }).playground);

t.test('playground: a song as the soundtrack with its beat, one sound-reactive param, stop', { timeout: 300_000 }, async (t) => {
  const { server, api, key } = await startLiveServer(t);
  const song = await api('POST', '/music/v1/songs', { prompt: 'steady house groove with bass and chords', duration: 10, bpm: BPM, seed: 5 });
  t.equal(song.status, 202, 'a song of 10 s at 120 BPM queued');
  const songId = song.body['id'] as string;
  const rendered = await until('the song rendered', () => api('GET', `/music/v1/songs/${songId}`), (r) => r.body['status'] === 'done' || r.body['status'] === 'failed', 200_000, 250);
  t.equal(rendered.body['status'], 'done', 'a rendered song of the account');

  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(`${server.url}/web/playground.html#key=${key}`);
  await page.fill('#prompt', 'a neon city at night');
  await page.click('#create');
  await page.waitForSelector('#soundCard:not([hidden])', { timeout: 15_000 });
  const streamId = /Stream (str_\S+)/.exec((await page.textContent('#streamInfo')) ?? '')?.[1] ?? '';
  t.match(streamId, /^str_/, 'a stream made from the page');

  // The card lists the account's rendered songs, with tempo and length.
  await page.waitForFunction((id) => [...document.querySelectorAll('#stSong option')].some((o) => (o as HTMLOptionElement).value === id), songId, { timeout: 15_000 });
  t.match(await page.textContent(`#stSong option[value="${songId}"]`), new RegExp(`${BPM} BPM, 10 s`), 'the song is offered with its tempo and length');

  // Nothing plays without a publisher ("idle"): publish the camera and microphone first.
  await page.click('#publish');
  await page.waitForFunction(() => document.getElementById('pubState')?.textContent === 'connected', undefined, { timeout: 30_000 });

  await page.selectOption('#stSong', songId);
  await page.click('#stPlay');
  const set = await until('the node plays it', () => api('GET', `/v1/streams/${streamId}/soundtrack`), (r) => r.body['data']?.['state'] === 'playing', 20_000);
  t.match(set.body['data'], { song_id: songId, take: 1, loop: true, gain_db: 0, duck_publisher_db: -12 }, 'the page set the soundtrack as chosen (loop on, camera ducked 12 dB)');
  await page.waitForFunction(() => document.getElementById('stState')?.textContent === 'playing', undefined, { timeout: 10_000 });
  t.pass('the card says it plays');

  // The beat: in step with the node's position in the take, and at the song's tempo.
  const serverBeat = async () => {
    const r = await api('GET', `/v1/streams/${streamId}/soundtrack`);
    const d = r.body['data'] as { position_s: number; duration_s: number };
    return Math.floor((d.position_s * BPM) / 60);
  };
  const first = await until('a beat shown', () => shown(page), (s) => s.beat !== null, 10_000);
  // Count the beats the page shows over ≥ 3 s of its own clock, reading it each 100 ms.
  let beats = 0;
  let last = first.beat!;
  while (last.at - first.beat!.at < 3000) {
    const next = await until('the next beat frame', () => shown(page), (s) => s.beat !== null && s.beat.at >= last.at + 100, 5_000, 20);
    if (next.beat!.beat !== last.beat) beats++;
    last = next.beat!;
  }
  const bpm = (beats / (last.at - first.beat!.at)) * 60_000;
  t.ok(bpm > BPM * 0.75 && bpm < BPM * 1.25, `the beat runs at the song's tempo (${beats} beats in ${((last.at - first.beat!.at) / 1000).toFixed(1)} s: ${bpm.toFixed(0)} BPM, the song ${BPM})`);
  t.equal(await page.$$eval('#beat span.on', (d) => d.length), 1, 'one beat of the bar is lit');
  // Where the node says the take is, read between two reads of the page.
  const pageBefore = (await shown(page)).beat!.beat;
  const fromServer = await serverBeat();
  const pageAfter = (await shown(page)).beat!.beat;
  // The take wraps at its end (10 s = 20 beats); a read may straddle one beat.
  const near = (b: number) => Math.min(Math.abs(b - fromServer), 20 - Math.abs(b - fromServer)) <= 1;
  t.ok(near(pageBefore) && near(pageAfter), `the beat shown is where the node is (page beats ${pageBefore} and ${pageAfter} around the node's ${fromServer})`);
  await page.screenshot({ path: join(ARTIFACTS, 'playground-5-soundtrack.png'), fullPage: true });

  // A mapping the server refuses (a seed follows onsets or beats only): the page says why.
  await page.selectOption('#mapParam', 'seed');
  await page.selectOption('#mapFeature', 'rms');
  await page.click('#mapApply');
  await page.waitForSelector('#error:not([hidden])', { timeout: 10_000 });
  t.match(await page.textContent('#error'), /audio_mappings/, `a refused mapping is explained, naming the field ("${await page.textContent('#error')}")`);

  // The song's loudness to delta: the range the page suggests for delta, applied live.
  await page.selectOption('#mapParam', 'delta');
  t.same([await page.inputValue('#mapMin'), await page.inputValue('#mapMax')], ['0.3', '0.9'], 'picking delta suggests a range for it');
  await page.click('#mapApply');
  await page.waitForFunction(() => /Applied audio_mappings/.test(document.getElementById('patchState')?.textContent ?? ''), undefined, { timeout: 10_000 });
  const stored = await api('GET', `/v1/streams/${streamId}`);
  t.same(stored.body['params']['audio_mappings'], [{ source: 'soundtrack', feature: 'rms', param: 'delta', range: [0.3, 0.9], smoothing_ms: 0 }], 'the stream has the mapping');
  const mapped = await until('the mapped value shown', () => shown(page), (s) => typeof s.mapping?.value === 'number' && (s.mapping.feature_value ?? 0) > 0, 30_000);
  const m = mapped.mapping!;
  t.ok(m.value! >= 0.3 && m.value! <= 0.9, `delta follows the song's loudness (feature ${m.feature_value!.toFixed(2)} → delta ${m.value!.toFixed(3)})`);
  t.match(await page.textContent('#mapValue'), /^delta 0\.\d{3}$/, 'and the card shows the value');
  const meter = await page.$eval('#mapMeter', (e) => Number.parseFloat((e as HTMLElement).style.width));
  t.ok(meter > 0, `the feature's meter moves (${meter} %)`);
  await page.screenshot({ path: join(ARTIFACTS, 'playground-6-mapping.png'), fullPage: true });

  await page.click('#mapClear');
  await until('the mapping cleared', () => api('GET', `/v1/streams/${streamId}`), (r) => Array.isArray(r.body['params']['audio_mappings']) && r.body['params']['audio_mappings'].length === 0, 10_000);
  await page.waitForFunction(() => document.getElementById('mapValue')?.textContent === '–', undefined, { timeout: 10_000 });
  t.pass('clearing the mapping clears the card');

  await page.click('#stStop');
  await page.waitForFunction(() => document.getElementById('stState')?.textContent === 'none', undefined, { timeout: 10_000 });
  t.equal((await api('GET', `/v1/streams/${streamId}/soundtrack`)).body['data'], null, 'Stop removes the soundtrack');
  t.equal(await page.$$eval('#beat span.on', (d) => d.length), 0, 'and the beat stops');
  t.same(pageErrors, [], 'no errors on the page');
});
