/**
 * Hostile slate images against the real server (api and media roles in this process, real HTTP on
 * loopback): PNG bombs built chunk by chunk (test/helpers/pngBombs.ts), sent as data: URLs. Each
 * is answered 400 `REQUEST/INVALID` naming `image_url` and the problem within a second, and the
 * process's peak resident memory (VmHWM, reset through /proc/self/clear_refs before the attack)
 * grows by a bounded amount. A legitimate image is stored as our own normalised PNG, never as
 * the client's bytes, so the node that shows it decodes only what we wrote. Parallel PUTs beyond
 * the decode slots and queue are answered 503 with Retry-After.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { deflateSync } from 'node:zlib';
import pino from 'pino';
import t from 'tap';
import { ImageDecoder } from '../../images/index.ts';
import { FsBlobStore } from '../../store/index.ts';
import { SlateImageService } from '../../streams/index.ts';
import { startLiveServer } from '../helpers/liveServer.ts';
import { iccpBomb, itxtBomb, pixelBomb, plainPng, pngChunk, ztxtBomb } from '../helpers/pngBombs.ts';

const MiB = 1024 * 1024;
const dataUrl = (b: Buffer) => `data:image/png;base64,${b.toString('base64')}`;

/** This process's resident memory now and its peak since the last reset, MiB. */
function memory(): { rss: number; peak: number } {
  const status = readFileSync('/proc/self/status', 'utf8');
  const kib = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN);
  return { rss: kib('VmRSS') / 1024, peak: kib('VmHWM') / 1024 };
}
/** Resets the peak (VmHWM) to the current RSS (Linux clear_refs 5). */
const resetPeak = () => writeFileSync('/proc/self/clear_refs', '5');

/** Chunk types of a PNG, in order. */
function chunkTypes(png: Buffer): string[] {
  const types: string[] = [];
  for (let at = 8; at + 8 <= png.length; at += 12 + png.readUInt32BE(at)) types.push(png.toString('latin1', at + 4, at + 8));
  return types;
}

t.test('image bombs are answered 400 within a second naming the problem, with bounded memory', { timeout: 120_000 }, async (t) => {
  const { api } = await startLiveServer(t, { env: { ROLES: 'api,media' } });
  const created = await api('POST', '/v1/streams', { params: { prompt: 'bombs', width: 384, height: 384, skip_diffusion: true } });
  t.equal(created.status, 201);
  const id = created.body['id'] as string;

  const bombs: [string, Buffer, RegExp][] = [
    ['a 1 MB PNG whose zTXt inflates to 1 GiB', await ztxtBomb(1024 * MiB), /zTXt chunk inflates to more than 5242880 bytes/],
    ['a 255 KB PNG whose iTXt inflates to 256 MiB', await itxtBomb(256 * MiB), /iTXt chunk inflates to more than 5242880 bytes/],
    ['a 1 MB PNG whose ICC profile (iCCP) inflates to 1 GiB', await iccpBomb(1024 * MiB), /iCCP chunk inflates to more than 5242880 bytes/],
    ['a 9 KB PNG of 30000×30000 pixels', await pixelBomb(30000, 30000, 64), /30000×30000, more than 16777216 pixels/],
    ['a 49 KB PNG of 4097×4096 pixels (48 MiB once inflated)', await pixelBomb(4097, 4096), /4097×4096, more than 16777216 pixels/],
    ['a BMP (not taken)', Buffer.concat([Buffer.from('BM'), Buffer.alloc(64)]), /not a PNG, JPEG, WebP or GIF image/],
  ];
  for (const [, bytes] of bombs) t.ok(bytes.length < 1.1 * MiB, `${bytes.length} bytes sent`);

  const before = memory();
  resetPeak();
  for (const [what, bytes, why] of bombs) {
    const t0 = performance.now();
    const res = await api('PUT', `/v1/streams/${id}/slate`, { image_url: dataUrl(bytes) });
    const ms = performance.now() - t0;
    t.equal(res.status, 400, `${what}: 400`);
    t.equal(res.body['code'], 'REQUEST/INVALID', what);
    t.match(JSON.stringify(res.body['details']), /image_url/, `${what}: names image_url`);
    t.match(String(res.body['error']), why, `${what}: says why (${String(res.body['error'])})`);
    t.ok(ms < 1000, `${what}: answered in ${Math.round(ms)} ms (< 1000)`);
  }
  const after = memory();
  t.comment(`RSS before ${before.rss.toFixed(0)} MiB, peak during the bombs ${after.peak.toFixed(0)} MiB`);
  t.ok(after.peak - before.rss < 128, `peak RSS grew ${(after.peak - before.rss).toFixed(0)} MiB during the bombs (< 128)`);
  t.equal((await api('GET', `/v1/streams/${id}/slate`)).body['image_url'], null, 'nothing stored');

  // At the pixel cap, one colour: 48 MiB of pixels from 49 KB. Legitimate, so taken, within bounds.
  resetPeak();
  const big = await pixelBomb(4096, 4096);
  const t0 = performance.now();
  const ok = await api('PUT', `/v1/streams/${id}/slate`, { image_url: dataUrl(big) });
  const ms = performance.now() - t0;
  t.equal(ok.status, 200, JSON.stringify(ok.body));
  t.ok(ms < 3000, `a 4096² image is taken in ${Math.round(ms)} ms (< 3000)`);
  const peak = memory().peak;
  t.comment(`peak during the 4096² image ${peak.toFixed(0)} MiB`);
  t.ok(peak - before.rss < 192, `peak RSS grew ${(peak - before.rss).toFixed(0)} MiB for the 4096² image (< 192)`);
});

t.test('a stored slate image is our own normalised PNG, not the client’s bytes', { timeout: 60_000 }, async (t) => {
  const { api, dataDir } = await startLiveServer(t, { env: { ROLES: 'api,media' } });
  const created = await api('POST', '/v1/streams', { params: { prompt: 'normalised', width: 384, height: 384, skip_diffusion: true } });
  const id = created.body['id'] as string;
  // 2500×400 magenta with a 1 MiB zTXt comment (under the cap) and an ICC profile: taken, but
  // neither the text nor the profile nor the size reach the stored file.
  const img = plainPng(2500, 400, [200, 40, 150]);
  const ztxt = pngChunk('zTXt', Buffer.concat([Buffer.from('Comment\0\0', 'latin1'), deflateSync(Buffer.alloc(MiB, 0x41))]));
  const iccp = pngChunk('iCCP', Buffer.concat([Buffer.from('icc\0\0', 'latin1'), deflateSync(Buffer.alloc(3000, 7))]));
  const client = Buffer.concat([img.subarray(0, 33), iccp, ztxt, img.subarray(33)]);
  const res = await api('PUT', `/v1/streams/${id}/slate`, { image_url: dataUrl(client) });
  t.equal(res.status, 200, JSON.stringify(res.body));
  const stored = readFileSync(join(dataDir, 'blobs', 'slates', id, 'image.png'));
  t.not(Buffer.compare(stored, client), 0, 'the client’s bytes are not what is stored');
  t.equal(res.body['size'], stored.length, 'size is the stored file’s');
  const types = chunkTypes(stored);
  t.notOk(types.some((c) => ['zTXt', 'iTXt', 'tEXt', 'iCCP'].includes(c)), `no text or ICC chunk stored (${types.join(' ')})`);
  t.same([stored.readUInt32BE(16), stored.readUInt32BE(20)], [1920, 307], 'fitted inside 1920 px, aspect kept');
});

t.test('parallel PUTs beyond the decode slots and their queue are answered 503 with Retry-After', { timeout: 120_000 }, async (t) => {
  // 2 slots, 2 waiting; 6000² images (108 MB of pixels each, ≈ 0.3 s a decode) so all 8 arrive before one finishes.
  const env = { ROLES: 'api,media', IMAGE_DECODE_CONCURRENCY: '2', IMAGE_DECODE_QUEUE: '2', IMAGE_MAX_PIXELS: String(8192 * 8192) };
  const { api, url, key } = await startLiveServer(t, { env });
  const created = await api('POST', '/v1/streams', { params: { prompt: 'parallel', width: 384, height: 384, skip_diffusion: true } });
  const id = created.body['id'] as string;
  const body = { image_url: dataUrl(await pixelBomb(6000, 6000)) };
  const replies = await Promise.all(Array.from({ length: 8 }, async () => {
    const r = await fetch(`${url}/v1/streams/${id}/slate`, { method: 'PUT', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, retryAfter: r.headers.get('retry-after'), body: (await r.json()) as Record<string, unknown> };
  }));
  const statuses = replies.map((r) => r.status).sort();
  t.same(statuses, [200, 200, 200, 200, 503, 503, 503, 503], '2 decode, 2 wait and are served, 4 are refused');
  for (const r of replies.filter((x) => x.status === 503)) {
    t.equal(r.body['code'], 'SERVICE/UNAVAILABLE');
    t.match(String(r.body['error']), /image decoder is busy/);
    t.equal(r.retryAfter, '2', 'Retry-After: the decode time cap, s');
  }
  const again = await api('PUT', `/v1/streams/${id}/slate`, body);
  t.equal(again.status, 200, 'once the slots are free, the next PUT is served');
});

t.test('slate images stored by an older version (the client’s bytes) become our normalised PNG; a bomb among them is removed', { timeout: 120_000 }, async (t) => {
  const { api, dataDir, server } = await startLiveServer(t, { env: { ROLES: 'api,media' } });
  const ids: string[] = [];
  for (const name of ['legacy ok', 'legacy bomb']) {
    const created = await api('POST', '/v1/streams', { params: { prompt: name, width: 384, height: 384, skip_diffusion: true } });
    ids.push(created.body['id'] as string);
  }
  const [okId = '', bombId = ''] = ids;
  // What an older version left: `image` (the client's bytes) and meta.json, no image.png.
  const blobs = new FsBlobStore(join(dataDir, 'blobs'));
  const meta = (size: number) => Buffer.from(JSON.stringify({ imageUrl: 'data:', size, updatedAt: new Date().toISOString() }));
  const legacyOk = plainPng(2500, 400, [200, 40, 150]);
  const legacyBomb = await ztxtBomb(1024 * MiB);
  await blobs.put(`slates/${okId}/image`, legacyOk);
  await blobs.put(`slates/${okId}/meta.json`, meta(legacyOk.length));
  await blobs.put(`slates/${bombId}/image`, legacyBomb);
  await blobs.put(`slates/${bombId}/meta.json`, meta(legacyBomb.length));

  const service = new SlateImageService({ store: server.store, blobs, images: new ImageDecoder(), logger: pino({ level: 'silent' }) });
  t.same(await service.migrateLegacy(), { converted: 1, removed: 1 });
  t.notOk(existsSync(join(dataDir, 'blobs', 'slates', okId, 'image')), 'the client’s bytes are gone');
  const stored = readFileSync(join(dataDir, 'blobs', 'slates', okId, 'image.png'));
  t.same([stored.readUInt32BE(16), stored.readUInt32BE(20)], [1920, 307], 'our normalised PNG in their place');
  const view = await api('GET', `/v1/streams/${okId}/slate`);
  t.equal(view.body['size'], stored.length, 'the API reports the stored file');
  const bombView = await api('GET', `/v1/streams/${bombId}/slate`);
  t.equal(bombView.body['image_url'], null, 'the refused one is removed, meta and all: the API shows no picture');
  t.same(await service.migrateLegacy(), { converted: 0, removed: 0 }, 'a second run finds nothing to do');
});
