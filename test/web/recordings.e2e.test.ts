/**
 * The pages' recording controls, in headless Chromium against the real server: the playground's
 * "Record the output" toggle PATCHes `record` (and shows the stream's setting), and the viewer
 * page lists the stream's recordings for its owner (the key this browser holds) with a download
 * that is a real MP4 (ffprobe decodes every frame) and a Play button that plays the recording
 * through hls.js; a viewer page of a stream this browser does not own shows no list.
 */
import t from 'tap';
import { launchChromium } from '../helpers/chromium.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { probeRecording } from '../helpers/recordingProbe.ts';

t.test('playground record toggle and the viewer page list of recordings', { timeout: 180_000 }, async (t) => {
  const { server, api, key } = await startLiveServer(t, { env: { ROLES: 'api,media' } });
  const ctx = await launchChromium(t, { fakeMedia: false });
  const page = await ctx.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(`${server.url}/web/playground.html#key=${key}`);
  await page.click('#create');
  await page.waitForSelector('#controls:not([hidden])', { timeout: 15_000 });
  t.equal(await page.isChecked('#record'), false, 'a new stream is not recorded');
  const streamId = /Stream (str_\S+) —/.exec((await page.textContent('#streamInfo')) ?? '')?.[1] as string;

  await page.check('#record');
  await page.waitForFunction(() => /^Recording/.test(document.getElementById('recordState')?.textContent ?? ''), undefined, { timeout: 10_000 });
  t.equal((await api('GET', `/v1/streams/${streamId}`)).body['record'], true, 'the toggle turned recording on');

  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: await page.inputValue('#whipUrl'), token: await page.inputValue('#streamKey'), source: await stampedH264({ size: 256, frames: 600, gop: 30 }) });
  t.equal(pub.status, 201, 'publisher live');
  let segments = 0;
  for (let i = 0; i < 600 && segments < 4; i++) {
    segments = ((await api('GET', `/v1/streams/${streamId}/recordings`)).body['data']?.[0]?.['segments'] as number | undefined) ?? 0;
    if (segments < 4) await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  t.ok(segments >= 4, `${segments} segments recorded`);
  await page.uncheck('#record');
  await page.waitForFunction(() => /^Not recording/.test(document.getElementById('recordState')?.textContent ?? ''), undefined, { timeout: 10_000 });
  t.equal((await api('GET', `/v1/streams/${streamId}`)).body['record'], false, 'the toggle turned recording off');

  const share = (await page.getAttribute('#share', 'href')) as string;
  const viewer = await ctx.newPage();
  viewer.on('pageerror', (e) => pageErrors.push(e.message));
  await viewer.goto(`${server.url}${share}`);
  await viewer.waitForSelector('#recordingsCard:not([hidden])', { timeout: 10_000 });
  for (let i = 0; i < 100 && (await viewer.getAttribute('#recordings li', 'data-state')) !== 'complete'; i++) await viewer.click('#refreshRecordings');
  t.equal(await viewer.locator('#recordings li').count(), 1, 'the viewer page lists the one recording');
  t.equal(await viewer.getAttribute('#recordings li', 'data-state'), 'complete');
  t.match(await viewer.textContent('#recordings li'), /\d+:\d\d · [\d.]+ (kB|MB) · complete/, 'with its length, size and state in words');

  await viewer.click('#recordings li button.download');
  await viewer.waitForFunction(() => (window as unknown as { recordings: { lastDownload: string | null } }).recordings.lastDownload !== null, undefined, { timeout: 30_000 });
  const url = (await viewer.evaluate(() => (window as unknown as { recordings: { lastDownload: string } }).recordings.lastDownload)) as string;
  const file = await fetch(url);
  t.equal(file.status, 200, 'the download link works without the key');
  t.equal(file.headers.get('content-type'), 'video/mp4');
  await file.body?.cancel();
  const probed = await probeRecording(url);
  t.ok(probed.packets[0]?.key && probed.decodedFrames === probed.packets.length, `a real MP4: ${probed.decodedFrames} frames decode, ${probed.duration} s`);

  await viewer.click('#recordings li button.play');
  await viewer.waitForFunction(() => document.body.dataset['mode'] === 'recording', undefined, { timeout: 30_000 });
  await viewer.waitForFunction(() => (document.getElementById('video') as HTMLVideoElement).currentTime > 1, undefined, { timeout: 30_000 });
  t.pass('Play plays the recording in the page (hls.js)');

  const stranger = await ctx.newPage();
  await stranger.goto(`${server.url}/web/watch.html?v=0123456789abcdef01234567`);
  await stranger.waitForFunction(() => document.getElementById('status')?.dataset['state'] !== undefined);
  t.ok(await stranger.$eval('#recordingsCard', (e) => (e as HTMLElement).hidden), "no list on the viewer page of a stream this browser doesn't own");

  t.same(pageErrors, [], 'no uncaught page errors');
  await pubs.stop(pub.id);
});
