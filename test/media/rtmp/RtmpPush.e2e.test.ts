/**
 * RTMP push against a real RTMP server: nginx with libnginx-mod-rtmp (Debian packages
 * `nginx-light` + `libnginx-mod-rtmp`), started per test on a free port with a temp config that
 * records everything (`record all`) and tells the test over HTTP when a publisher connects
 * (`on_publish`) and when a recording is complete (`on_record_done`), so the test waits on events,
 * not sleeps. The publisher is headless Chromium (fake camera + microphone) over WHIP.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import t from 'tap';
import { launchChromium } from '../../helpers/chromium.ts';
import { haveNginx, startNginx } from '../../helpers/nginxRtmp.ts';
import { AddressPolicy } from '../../../outbound/index.ts';
import { hlsOf, rtmpOf, type PeerPage, STREAM_ID, STREAM_KEY, startMediaServer } from '../harness.ts';

const run = promisify(execFile);
async function probe(file: string): Promise<{ video?: { codec_name: string; width: number; height: number }; audio?: { codec_name: string; sample_rate: string; channels: number }; duration: number }> {
  const { stdout } = await run('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_type,codec_name,width,height,sample_rate,channels:format=duration', '-of', 'json', file]);
  const j = JSON.parse(stdout) as { streams: { codec_type: string; codec_name: string; width: number; height: number; sample_rate: string; channels: number }[]; format: { duration: string } };
  return { video: j.streams.find((s) => s.codec_type === 'video'), audio: j.streams.find((s) => s.codec_type === 'audio'), duration: Number(j.format.duration) };
}

async function waitUntil(what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** nginx-rtmp, a media node pushing to it, and a Chromium publisher: returns once the push is live. */
async function livePush(t: Parameters<typeof startNginx>[0]) {
  const rtmp = await startNginx(t);
  // The webhooks' address rules with loopback allowed (as ALLOW_LOOPBACK_TARGETS does): the relay checks and dials.
  const { node, baseUrl } = await startMediaServer(t, { outputRtmpUrl: `rtmp://127.0.0.1:${rtmp.port}/live/out`, outboundPolicy: new AddressPolicy({ allowLoopback: true }) });
  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  await page.goto(`${baseUrl}/peer.html`);
  const pub = await page.evaluate((o) => (window as unknown as PeerPage).publish(o), { url: `${baseUrl}/live/${STREAM_ID}/whip`, token: STREAM_KEY, codec: 'VP8' as const, width: 320, height: 240 });
  if (pub.status !== 201) throw new Error(`WHIP publish answered ${pub.status}`);
  // The push carries the output from its first frame: the slate while the publisher's video is
  // still coming up (decision 0011), then the live picture. The recording starts there.
  await waitUntil('output', () => (node.status(STREAM_ID)?.output ?? 'none') !== 'none', 20_000);
  const outputAt = Date.now();
  await rtmp.notes.waitFor('publish', 1, 20_000);
  await waitUntil('push live', () => rtmpOf(node, STREAM_ID)?.state === 'live', 20_000);
  return { rtmp, node, page, outputAt };
}

t.test('the output is pushed to output_rtmp_url as H.264 + AAC; the recording has the stream size and duration', { timeout: 90_000 }, async (t) => {
  if (!haveNginx) return t.fail('nginx-light + libnginx-mod-rtmp are not installed (apt-get install -y nginx-light libnginx-mod-rtmp; .ci/run does)');
  const { rtmp, node, page, outputAt } = await livePush(t);
  const liveAt = outputAt;
  t.match(rtmpOf(node, STREAM_ID), { state: 'live', url: `rtmp://127.0.0.1:${rtmp.port}/live/…`, reconnects: 0 }, 'status reports the push live, key redacted');
  await page.waitForTimeout(5000); // the length of media we want recorded
  node.endStream(STREAM_ID);
  const pushedMs = Date.now() - liveAt;
  await rtmp.notes.waitFor('record_done', 1, 15_000);
  const file = rtmp.notes.events.find((e) => e.kind === 'record_done')?.path ?? '';
  const p = await probe(file);
  t.comment(`recorded ${file.split('/').at(-1)}: ${JSON.stringify(p)} (pushed ≈ ${pushedMs} ms)`);
  t.match(p.video, { codec_name: 'h264', width: 256, height: 256 }, 'H.264 at the stream size');
  t.match(p.audio, { codec_name: 'aac', sample_rate: '48000', channels: 2 }, 'AAC 48 kHz stereo');
  t.ok(Math.abs(p.duration * 1000 - pushedMs) < 1500, `duration ${p.duration.toFixed(2)} s ≈ pushed ${(pushedMs / 1000).toFixed(2)} s`);
});

t.test('killing and restarting the RTMP server mid-stream: the push reconnects and status shows it; encoding and HLS go on meanwhile', { timeout: 120_000 }, async (t) => {
  if (!haveNginx) return t.fail('nginx-light + libnginx-mod-rtmp are not installed (apt-get install -y nginx-light libnginx-mod-rtmp; .ci/run does)');
  const { rtmp, node, page } = await livePush(t);

  await rtmp.kill();
  const framesAtKill = node.status(STREAM_ID)?.framesOut ?? 0;
  const msnAtKill = hlsOf(node, STREAM_ID)?.msn ?? -1;
  await waitUntil('push notices the drop', () => rtmpOf(node, STREAM_ID)?.state === 'reconnecting', 15_000);
  const down = rtmpOf(node, STREAM_ID);
  t.ok(down?.lastError, `status carries the error: ${down?.lastError}`);
  // The stream itself keeps encoding while the push is down.
  await waitUntil('output keeps flowing', () => (node.status(STREAM_ID)?.framesOut ?? 0) > framesAtKill + 30, 10_000);
  t.equal(node.status(STREAM_ID)?.state, 'live', 'the stream stays live while the RTMP server is down');
  await waitUntil('HLS keeps packaging', () => (hlsOf(node, STREAM_ID)?.msn ?? -1) > msnAtKill, 10_000);
  t.pass('HLS segments keep coming while the RTMP server is down');

  await rtmp.start();
  await rtmp.notes.waitFor('publish', 2, 30_000);
  await waitUntil('push live again', () => rtmpOf(node, STREAM_ID)?.state === 'live', 20_000);
  const up = rtmpOf(node, STREAM_ID);
  t.ok((up?.reconnects ?? 0) >= 1, `status shows ${up?.reconnects} reconnect attempt(s)`);
  await page.waitForTimeout(3000);
  node.endStream(STREAM_ID);
  await rtmp.notes.waitFor('record_done', 1, 15_000);
  const file = rtmp.notes.events.filter((e) => e.kind === 'record_done').at(-1)?.path ?? '';
  const p = await probe(file);
  t.match(p.video, { codec_name: 'h264', width: 256, height: 256 }, 'the post-reconnect recording is H.264 at the stream size');
  t.match(p.audio, { codec_name: 'aac' }, 'and has AAC');
  t.ok(p.duration > 2, `and is ${p.duration.toFixed(2)} s long`);
});

t.test('a push target the address rules refuse is never dialled; status and logs say why and never show the stream key', { timeout: 90_000 }, async (t) => {
  if (!haveNginx) return t.fail('nginx-light + libnginx-mod-rtmp are not installed (apt-get install -y nginx-light libnginx-mod-rtmp; .ci/run does)');
  const rtmp = await startNginx(t);
  const key = 'sk_secret_Zq8v3Kx1';
  const logs: string[] = [];
  const { node, baseUrl } = await startMediaServer(t, {
    outputRtmpUrl: `rtmp://127.0.0.1:${rtmp.port}/live/${key}`,
    outboundPolicy: new AddressPolicy(), // production rules: loopback refused
    onLog: (line) => logs.push(line),
  });
  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  await page.goto(`${baseUrl}/peer.html`);
  const pub = await page.evaluate((o) => (window as unknown as PeerPage).publish(o), { url: `${baseUrl}/live/${STREAM_ID}/whip`, token: STREAM_KEY, codec: 'VP8' as const, width: 320, height: 240 });
  t.equal(pub.status, 201);
  await waitUntil('a refused attempt and its retry', () => (rtmpOf(node, STREAM_ID)?.reconnects ?? 0) >= 1, 20_000);
  const status = rtmpOf(node, STREAM_ID);
  t.match(status?.lastError, /refused: .*127\.0\.0\.1.*loopback/, `status says why: ${status?.lastError}`);
  t.equal(status?.url, `rtmp://127.0.0.1:${rtmp.port}/live/…`);
  t.equal(rtmp.notes.events.filter((e) => e.kind === 'publish').length, 0, 'the RTMP server never saw a publish');
  node.endStream(STREAM_ID);
  t.ok(logs.length > 0, `${logs.length} log lines`);
  t.notOk(logs.some((l) => l.includes(key)), 'no log line carries the stream key');
  t.notOk(JSON.stringify(node.status(STREAM_ID) ?? {}).includes(key), 'status does not carry it');
});
