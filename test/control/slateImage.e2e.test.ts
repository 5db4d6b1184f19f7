/**
 * A stream-defined slate image on the real server: the account sets a PNG (served over HTTPS on
 * loopback with a test CA, fetched by the webhooks' outbound client with ALLOW_LOOPBACK_TARGETS), an OBS-like
 * publisher streams and leaves, and what an LL-HLS player then downloads — decoded by ffmpeg —
 * shows that picture (its colour at the centre), not the greyed last frame (neutral chroma).
 * Removing the image brings the greyed frame back. Also: validation names `image_url` (not an
 * image, a URL that is not http(s)/data:, a fetch that fails), another account sees nothing.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { makeTls } from '../webhooks/helpers.ts';

/** The image's colour (a saturated magenta: no greyed or plain slate frame has chroma). */
const COLOR = [200, 40, 150] as const;

function makePng(dir: string): Buffer {
  const file = join(dir, 'slate.png');
  const hex = COLOR.map((c) => c.toString(16).padStart(2, '0')).join('');
  const r = spawnSync('ffmpeg', ['-v', 'error', '-y', '-f', 'lavfi', '-i', `color=c=0x${hex}:s=320x240`, '-frames:v', '1', file]);
  if (r.status !== 0) throw new Error(r.stderr.toString());
  return readFileSync(file);
}

/** Centre pixel (RGB) of the last frame of init+segment, decoded by ffmpeg. */
function centrePixel(media: Buffer): Promise<[number, number, number] | null> {
  return new Promise((resolve) => {
    const p = spawn('ffmpeg', ['-v', 'error', '-i', 'pipe:0', '-vf', 'crop=16:16:(iw-16)/2:(ih-16)/2,scale=1:1', '-f', 'rawvideo', '-pix_fmt', 'rgb24', 'pipe:1'], { stdio: ['pipe', 'pipe', 'ignore'] });
    const out: Buffer[] = [];
    p.stdout.on('data', (c: Buffer) => out.push(c));
    p.on('close', () => {
      const b = Buffer.concat(out);
      resolve(b.length >= 3 ? [b[b.length - 3]!, b[b.length - 2]!, b[b.length - 1]!] : null);
    });
    p.stdin.on('error', () => {});
    p.stdin.end(media);
  });
}

/** The newest complete HLS segment with its init segment, or null. */
async function newestSegment(playlistUrl: string): Promise<{ msn: number; bytes: Buffer } | null> {
  const res = await fetch(playlistUrl);
  if (res.status !== 200) {
    await res.text();
    return null;
  }
  let init = '';
  let seg = '';
  for (const line of (await res.text()).split('\n')) {
    const m = /^#EXT-X-MAP:URI="([^"]+)"/.exec(line);
    if (m) init = m[1]!;
    else if (/^seg\d+\.m4s$/.test(line)) seg = line;
  }
  if (!init || !seg) return null;
  const get = async (u: string) => Buffer.from(await (await fetch(new URL(u, playlistUrl))).arrayBuffer());
  return { msn: Number(/\d+/.exec(seg)![0]), bytes: Buffer.concat([await get(init), await get(seg)]) };
}

const near = (a: readonly number[], b: readonly number[], tol: number) => a.every((v, i) => Math.abs(v - b[i]!) <= tol);
const grey = (p: readonly number[]) => Math.max(...p) - Math.min(...p) <= 24;

t.test('the slate shows the stream-defined image while the publisher is away', { timeout: 180_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rv-slate-img-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const png = makePng(dir);
  let imageGets = 0;
  const tls = makeTls();
  t.teardown(() => tls.cleanup());
  const http = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    if (req.url === '/slate.png') {
      imageGets++;
      res.writeHead(200, { 'content-type': 'image/png' }).end(png);
    } else res.writeHead(404).end();
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => http.close(() => r())));
  const imageUrl = `https://127.0.0.1:${(http.address() as { port: number }).port}/slate.png`;

  const { server, api, dataDir } = await startLiveServer(t, { env: { ROLES: 'api,media', ALLOW_LOOPBACK_TARGETS: 'true', EXTRA_CA_FILE: join(tls.dir, 'ca.crt') } });
  const created = await api('POST', '/v1/streams', { params: { prompt: 'slate image', width: 384, height: 384, skip_diffusion: true } });
  t.equal(created.status, 201);
  const id = created.body['id'] as string;
  const playlistUrl = `${server.url}/hls/${created.body['output_playback_id'] as string}/plain.m3u8`;

  // Validation names the field; nothing is stored.
  for (const [body, why] of [
    [{ image_url: 'ftp://example.com/a.png' }, 'not http(s) or data:'],
    [{ image_url: imageUrl.replace('https:', 'http:') }, 'plain http (the outbound client speaks https only)'],
    [{ image_url: `data:text/plain;base64,${Buffer.from('hello').toString('base64')}` }, 'not an image'],
    [{ image_url: imageUrl.replace('slate.png', 'missing.png') }, 'a fetch that fails'],
    [{ image_url: imageUrl, extra: 1 }, 'an unknown field'],
  ] as const) {
    const res = await api('PUT', `/v1/streams/${id}/slate`, body);
    t.equal(res.status, 400, `400 for ${why}`);
    const fields = JSON.stringify(res.body['details'] ?? null);
    if (why !== 'an unknown field') t.match(fields, /image_url/, `and names image_url (${why})`);
  }
  t.equal((await api('GET', `/v1/streams/${id}/slate`)).body['image_url'], null, 'nothing stored');

  const set = await api('PUT', `/v1/streams/${id}/slate`, { image_url: imageUrl });
  t.equal(set.status, 200, JSON.stringify(set.body));
  t.equal(set.body['image_url'], imageUrl);
  t.equal(set.body['size'], readFileSync(join(dataDir, 'blobs', 'slates', id, 'image.png')).length, 'size is that of the normalised PNG stored');
  t.equal(imageGets, 1, 'fetched once, when set');
  const { key: otherKey } = await createAccountWithKey(server.store, 'pro');
  const other = await fetch(`${server.url}/v1/streams/${id}/slate`, { headers: { authorization: `Bearer ${otherKey}` } });
  t.equal(other.status, 404, 'another account sees nothing');

  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source: await stampedH264({ size: 256, frames: 300, gop: 30 }) });
  t.equal(pub.status, 201);

  // Reads the centre of the newest segment that came after `afterMsn`, until `want` holds (bounded).
  const watch = async (afterMsn: number, want: (p: [number, number, number]) => boolean): Promise<{ msn: number; pixel: [number, number, number] | null }> => {
    let last: { msn: number; pixel: [number, number, number] | null } = { msn: afterMsn, pixel: null };
    for (let i = 0; i < 150; i++) {
      const seg = await newestSegment(playlistUrl).catch(() => null);
      if (seg && seg.msn > last.msn) {
        last = { msn: seg.msn, pixel: await centrePixel(seg.bytes) };
        if (last.pixel && want(last.pixel)) return last;
      }
      await new Promise((r) => setTimeout(r, 300)); // the player's poll interval
    }
    return last;
  };
  // Live output reaches the HLS player (which keeps polling: the slate runs only while watched).
  let live = { msn: -1 };
  let seen = '';
  for (let i = 0; i < 300 && live.msn < 1; i++) {
    const seg = await newestSegment(playlistUrl).catch((err: unknown) => String(err));
    const output = (await api('GET', `/v1/streams/${id}/status`)).body['data']?.['output'] as string;
    seen = `${typeof seg === 'string' ? seg : seg?.msn ?? 'no segment'} / ${output}`;
    if (seg && typeof seg !== 'string' && output === 'live') live = { msn: seg.msn };
    await new Promise((r) => setTimeout(r, 200)); // poll interval
  }
  t.ok(live.msn >= 1, `live output reaches the HLS player (segment ${live.msn}; last seen ${seen})`);

  await pubs.stop(pub.id);
  const away = await watch(live.msn, (p) => near(p, COLOR, 40));
  t.ok(away.pixel && near(away.pixel, COLOR, 40), `while the publisher is away the player sees the image (centre ${JSON.stringify(away.pixel)}, image ${JSON.stringify(COLOR)})`);
  t.equal((await api('GET', `/v1/streams/${id}/status`)).body['data']?.['output'], 'slate', 'status says slate');

  // Removing the image brings the greyed last frame back (the node looks at the file every 2 s).
  t.equal((await api('DELETE', `/v1/streams/${id}/slate`)).status, 200);
  t.equal((await api('GET', `/v1/streams/${id}/slate`)).body['image_url'], null);
  const greyed = await watch(away.msn, (p) => grey(p));
  t.ok(greyed.pixel && grey(greyed.pixel), `without it the slate is the greyed last frame again (centre ${JSON.stringify(greyed.pixel)})`);
});
