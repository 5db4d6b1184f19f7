/**
 * Several RTMP destinations on the real server (embedded default): two nginx-rtmp receivers get
 * the same stream from its one encode; one is switched off and on again live through
 * `PUT /v1/streams/{id}/outputs` while the other keeps its connection; the API validates names and
 * URLs (the outbound address rules) and reports each push's state. The publisher is OBS-like
 * (libdatachannel, H.264). Receivers report connects and disconnects over nginx's HTTP callbacks.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import t from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer, type Json } from '../helpers/liveServer.ts';
import { freePort } from '../helpers/net.ts';
import { haveNginx, startNginx } from '../helpers/nginxRtmp.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';

t.test('two RTMP destinations from one encode; one toggled off and on live, the other untouched', { timeout: 180_000 }, async (t) => {
  if (!haveNginx) return t.fail('nginx-light + libnginx-mod-rtmp are not installed (.ci/run installs them)');
  const [a, b] = [await startNginx(t), await startNginx(t)];
  const { server, api } = await startLiveServer(t, { env: { ROLES: 'api,media', ALLOW_LOOPBACK_TARGETS: '1' } });
  const urlA = `rtmp://127.0.0.1:${a.port}/live/key-a`;
  const urlB = `rtmp://127.0.0.1:${b.port}/live/key-b`;

  // Validation on create: names, URLs and the outbound address rules, each naming its field.
  for (const [outputs, field] of [
    [[{ name: 'a', url: urlA }, { name: 'a', url: urlB }], 'unique'],
    [[{ name: 'output_rtmp_url', url: urlA }], 'outputs[0].name'],
    [[{ name: 'Bad Name', url: urlA }], 'outputs[0].name'],
    [[{ name: 'a', url: 'http://127.0.0.1/x' }], 'outputs[0].url'],
    [[{ name: 'a', url: 'rtmp://10.1.2.3/live/x' }], 'outputs[0].url'],
    [[{ name: 'a', url: urlA, rendition: 'quarter' }], 'outputs[0].rendition'],
    [[{ name: 'a', url: urlA, rendition: 'Half!' }], 'outputs[0].rendition'],
    [Array.from({ length: 5 }, (_, i) => ({ name: `o${i}`, url: urlA })), 'outputs'],
  ] as const) {
    const r = await api('POST', '/v1/streams', { params: { prompt: 'x', width: 384, height: 384, skip_diffusion: true }, outputs });
    t.equal(r.status, 400, `${JSON.stringify(outputs).slice(0, 60)}: 400`);
    t.match(JSON.stringify(r.body), field, `names ${field}`);
  }

  const created = await api('POST', '/v1/streams', {
    params: { prompt: 'two destinations', width: 384, height: 384, skip_diffusion: true },
    // b pushes the half rendition (a platform behind a thinner uplink), a the full encode.
    outputs: [{ name: 'a', url: urlA }, { name: 'b', url: urlB, rendition: 'half' }],
  });
  t.equal(created.status, 201, JSON.stringify(created.body).slice(0, 300));
  const id = created.body['id'] as string;
  const before = await api('GET', `/v1/streams/${id}/outputs`);
  t.same(
    before.body['data'].map((o: Json) => [o['name'], o['state'], o['url']]),
    [['a', 'idle', `rtmp://127.0.0.1:${a.port}/live/…`], ['b', 'idle', `rtmp://127.0.0.1:${b.port}/live/…`]],
    'idle before a publisher; stream keys hidden',
  );
  t.same(before.body['data'].map((o: Json) => o['rendition']), [null, 'half'], 'the rendition each pushes');

  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source: await stampedH264({ size: 384, frames: 300 }) });
  t.equal(pub.status, 201, 'publisher live');
  await Promise.all([a.notes.waitFor('publish', 1, 30_000), b.notes.waitFor('publish', 1, 30_000)]);
  t.pass('both receivers got a publisher');
  const states = async () => Object.fromEntries((await api('GET', `/v1/streams/${id}/outputs`)).body['data'].map((o: Json) => [o['name'], o]));
  const until = async (what: string, check: (s: Record<string, Json>) => boolean) => {
    for (let i = 0; i < 150; i++) {
      const s = await states();
      if (check(s)) return s;
      await new Promise((r) => setTimeout(r, 200)); // poll interval
    }
    throw new Error(`timed out: ${what}`);
  };
  await until('both live', (s) => s['a']?.['state'] === 'live' && s['b']?.['state'] === 'live');

  // Off: b's connection closes (nginx finishes its recording); a keeps its one connection.
  const off = await api('PUT', `/v1/streams/${id}/outputs`, { outputs: [{ name: 'a', url: urlA }, { name: 'b', url: urlB, enabled: false, rendition: 'half' }] });
  t.equal(off.status, 200);
  await b.notes.waitFor('record_done', 1, 20_000);
  t.pass('b was disconnected');
  let s = await states();
  t.equal(s['b']?.['state'], 'disabled');
  t.equal(s['a']?.['state'], 'live', 'a still live');
  t.equal(s['a']?.['reconnects'], 0, 'a was not reconnected');

  // On again.
  t.equal((await api('PUT', `/v1/streams/${id}/outputs`, { outputs: [{ name: 'a', url: urlA }, { name: 'b', url: urlB, enabled: true, rendition: 'half' }] })).status, 200);
  await b.notes.waitFor('publish', 2, 30_000);
  s = await until('b live again', (x) => x['b']?.['state'] === 'live');
  t.equal(a.notes.events.filter((e) => e.kind === 'publish').length, 1, 'a saw one publisher throughout');
  t.equal(a.notes.events.filter((e) => e.kind === 'record_done').length, 0, 'and no disconnect');

  // What b received while it was on is real H.264 at the half rendition's size.
  const rec = readdirSync(join(b.dir, 'rec')).filter((f) => f.endsWith('.flv'));
  t.ok(rec.length >= 1, `b recorded ${rec.length} file(s)`);
  const probe = JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-show_streams', '-of', 'json', join(b.dir, 'rec', rec[0] as string)], { encoding: 'utf8' })) as Json;
  const video = (probe['streams'] as Json[]).find((x) => x['codec_type'] === 'video');
  t.equal(video?.['codec_name'], 'h264');
  t.equal(video?.['width'], 192, 'b got the half rendition (384 → 192)');
  const probeA = () => {
    const f = readdirSync(join(a.dir, 'rec')).filter((x) => x.endsWith('.flv'))[0] as string;
    return (JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-show_streams', '-of', 'json', join(a.dir, 'rec', f)], { encoding: 'utf8' })) as Json)['streams'] as Json[];
  };
  t.equal(probeA().find((x) => x['codec_type'] === 'video')?.['width'], 384, 'a gets the full encode');

  // Removing b stops it; an unknown stream is 404.
  t.equal((await api('PUT', `/v1/streams/${id}/outputs`, { outputs: [{ name: 'a', url: urlA }] })).status, 200);
  await b.notes.waitFor('record_done', 2, 20_000);
  t.same(Object.keys(await states()), ['a']);
  t.equal((await api('PUT', '/v1/streams/str_nope/outputs', { outputs: [] })).status, 404);

});

t.test('an output URL ending in / publishes its key as the stream name and never shows it in the outputs, last_error or logs', { timeout: 120_000 }, async (t) => {
  if (!haveNginx) return t.fail('nginx-light + libnginx-mod-rtmp are not installed (.ci/run installs them)');
  const rtmp = await startNginx(t);
  const closed = await freePort(); // nothing listens: every attempt fails and is logged
  const keys = ['sekretkeyA1', 'sekretkeyB2'];
  const lines: string[] = [];
  const logger = pino({ level: 'debug' }, new Writable({ write: (chunk: Buffer, _enc, done) => (lines.push(chunk.toString()), done()) }));
  const { server, api } = await startLiveServer(t, { env: { ROLES: 'api,media', ALLOW_LOOPBACK_TARGETS: '1' }, logger });
  const created = await api('POST', '/v1/streams', {
    params: { prompt: 'trailing slash', width: 384, height: 384, skip_diffusion: true },
    outputs: [
      { name: 'trail', url: `rtmp://127.0.0.1:${rtmp.port}/live/${keys[0]}/` },
      { name: 'dead', url: `rtmp://127.0.0.1:${closed}/live/${keys[1]}/` },
    ],
  });
  t.equal(created.status, 201, JSON.stringify(created.body).slice(0, 300));
  const id = created.body['id'] as string;
  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source: await stampedH264({ size: 384, frames: 300 }) });
  t.equal(pub.status, 201, 'publisher live');
  let outputs: Json[] = [];
  for (let i = 0; i < 150; i++) {
    outputs = (await api('GET', `/v1/streams/${id}/outputs`)).body['data'] as Json[];
    const [trail, dead] = [outputs.find((o) => o['name'] === 'trail'), outputs.find((o) => o['name'] === 'dead')];
    if (trail?.['state'] === 'live' && (dead?.['reconnects'] ?? 0) >= 2 && dead?.['last_error']) break;
    await new Promise((r) => setTimeout(r, 200)); // poll interval
  }
  t.same(
    outputs.map((o) => [o['name'], o['url']]),
    [['trail', `rtmp://127.0.0.1:${rtmp.port}/live/…`], ['dead', `rtmp://127.0.0.1:${closed}/live/…`]],
    'urls show server and application only',
  );
  t.equal(outputs.find((o) => o['name'] === 'trail')?.['state'], 'live', 'the trailing-slash output is live');
  // The key is the stream name, not part of the application (ffmpeg alone reads `live/KEY` as the app).
  t.match(rtmp.notes.events.find((e) => e.kind === 'publish'), { app: 'live', name: keys[0] }, 'nginx saw app live, stream name = the key');
  const dead = outputs.find((o) => o['name'] === 'dead');
  t.ok((dead?.['reconnects'] ?? 0) >= 2 && typeof dead?.['last_error'] === 'string', `the dead output failed and retried: ${dead?.['last_error']}`);
  const body = JSON.stringify(outputs);
  t.ok(lines.some((l) => l.includes('reconnecting')), `the failures were logged (${lines.length} lines)`);
  for (const key of keys) {
    t.notOk(body.includes(key), `GET outputs never shows ${key}`);
    t.notOk(lines.find((l) => l.includes(key)), `no log line shows ${key}`);
  }
});
