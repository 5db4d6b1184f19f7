/**
 * The songs page, driven by headless Chromium against a real server (api + worker roles, real
 * render threads): a person types a key and a prompt, watches the song move through the line and
 * render, sees both takes' waveforms drawn, can play and download them. Screenshots go to
 * test/artifacts/.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { loadConfig } from '../../control/config.ts';
import { startServer } from '../../control/Server.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { freePort } from '../helpers/net.ts';

const ARTIFACTS = new URL('../artifacts/', import.meta.url).pathname;

t.test('a person makes a song on the songs page and gets two playable takes', { timeout: 240_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-songs-page-'));
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: await freePort(), LOG_LEVEL: 'silent', ROLES: 'api,worker', RENDER_WORKERS: 1 });
  const server = await startServer(config, { logger: pino({ level: 'silent' }) });
  t.teardown(async () => {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const { key } = await createAccountWithKey(server.store, 'free');

  const context = await launchChromium(t, { fakeMedia: false });
  const page = await context.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  const blocked: string[] = [];
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) blocked.push(m.text());
  });
  await page.goto(`${server.url}/web/songs.html`);
  await page.fill('#key', key);
  await page.fill('#prompt', 'dreamy synthwave with arpeggios, in A minor');
  await page.fill('#duration', '10');
  await page.selectOption('#variations', '2');
  await page.click('#go');

  // The state line goes through the line and rendering to done; polling is the page's own (2 s).
  await page.waitForSelector('#state[data-status]', { timeout: 30_000 });
  const firstState = await page.textContent('#state');
  t.match(firstState, /In line|Rendering|Done/, `shows where the song is: ${firstState}`);
  await page.waitForSelector('#state[data-status="done"]', { timeout: 200_000 });
  t.match(await page.textContent('#state'), /Done: \d+ bpm, A minor/);

  const takes = await page.$$eval('.take', (els) =>
    els.map((el) => {
      const canvas = el.querySelector('canvas') as HTMLCanvasElement;
      const data = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
      let painted = 0;
      for (let i = 3; i < data.length; i += 4) if (data[i]! > 0) painted++;
      return {
        painted: painted / (canvas.width * canvas.height),
        audio: (el.querySelector('audio') as HTMLAudioElement).src,
        links: [...el.querySelectorAll('a[download]')].map((a) => (a as HTMLAnchorElement).href),
      };
    }),
  );
  t.equal(takes.length, 2, 'both takes are shown');
  for (const take of takes) {
    t.ok(take.painted > 0.05, `a waveform is drawn (${(take.painted * 100).toFixed(1)}% of the canvas)`);
    t.match(take.audio, /\/songs\/sng_[^/]+\/[12]\.mp3$/);
    t.equal(take.links.length, 3, 'MP3, WAV and MIDI downloads');
  }

  // The audio element can load the MP3 through the redirect and signed link.
  const playable = await page.$eval('.take audio', (el) => {
    const audio = el as HTMLAudioElement;
    audio.preload = 'auto';
    audio.load();
    return new Promise<{ duration: number; error: number | null }>((resolve) => {
      audio.onloadedmetadata = () => resolve({ duration: audio.duration, error: null });
      audio.onerror = () => resolve({ duration: 0, error: audio.error?.code ?? -1 });
    });
  });
  t.equal(playable.error, null, 'the browser can load the MP3');
  t.ok(playable.duration >= 9, `the MP3 plays for ${playable.duration.toFixed(1)} s`);

  t.match(await page.textContent('#usage'), /1 of 10 songs used/, 'usage updates');
  t.same(pageErrors, [], 'no script errors');
  t.same(blocked, [], 'the CSP blocked nothing the page does');
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, 'songs-page.png'), fullPage: true });
});

t.test('with a section plan and stems: sections over the waveform, MIDI and stem downloads, solo and mute', { timeout: 240_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-songs-page-'));
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: await freePort(), LOG_LEVEL: 'silent', ROLES: 'api,worker', RENDER_WORKERS: 1 });
  const server = await startServer(config, { logger: pino({ level: 'silent' }) });
  t.teardown(async () => {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const { key } = await createAccountWithKey(server.store, 'pro');

  const context = await launchChromium(t, { fakeMedia: false });
  const page = await context.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await page.goto(`${server.url}/web/songs.html`);
  await page.fill('#key', key);
  await page.fill('#prompt', 'house with a pluck lead');
  await page.fill('#bpm', '120');
  await page.fill('#sections', 'intro 2 0.3 no drums\nverse 2 0.6 sparse\nchorus 2 0.9 full');
  await page.check('#stems');
  await page.click('#go');
  await page.waitForSelector('#state[data-status="done"]', { timeout: 200_000 });

  const bands = await page.$$eval('.take .section', (els) => els.map((el) => [(el as HTMLElement).dataset.name, (el as HTMLElement).style.width]));
  t.same(bands.map((b) => b[0]), ['intro', 'verse', 'chorus'], 'the section plan is drawn over the waveform');
  t.ok(bands.every((b) => Math.abs(parseFloat(b[1]!) - 100 / 3) < 0.01), 'each band as wide as its bars');
  const links = await page.$$eval('.take a[download]', (els) => els.map((a) => (a as HTMLAnchorElement).href));
  t.ok(links.some((h) => /\/1\.mid$/.test(h)), 'MIDI download');
  t.ok(links.some((h) => /\/1\/stems\.zip$/.test(h)), 'stems zip download');
  t.equal(links.filter((h) => /\/1\/stems\/\w+\.wav$/.test(h)).length, 5, 'five stem downloads');

  await page.click('.stems .load');
  await page.waitForSelector('.stems[data-loaded="true"]', { timeout: 60_000 });
  const gains = () => page.$$eval('.stems li', (els) => Object.fromEntries(els.map((el) => [(el as HTMLElement).dataset.stem, (el as HTMLElement).dataset.gain])));
  t.same(await gains(), { drums: '1', bass: '1', chords: '1', lead: '1', effects: '1' }, 'all stems sound after loading');
  await page.click('.stems li[data-stem="drums"] .solo');
  t.same(await gains(), { drums: '1', bass: '0', chords: '0', lead: '0', effects: '0' }, 'solo drums: only drums sound');
  await page.click('.stems li[data-stem="drums"] .solo');
  await page.click('.stems li[data-stem="bass"] .mute');
  t.same(await gains(), { drums: '1', bass: '0', chords: '1', lead: '1', effects: '1' }, 'mute bass: everything but the bass');
  await page.click('.stems .play');
  t.equal(await page.$eval('.stems', (el) => (el as HTMLElement).dataset.playing), 'true', 'stems play together');
  await page.click('.stems .stop');
  t.same(pageErrors, [], 'no script errors');
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, 'songs-page-stems.png'), fullPage: true });
});
