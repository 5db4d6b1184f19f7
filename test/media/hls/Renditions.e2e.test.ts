/**
 * Renditions over LL-HLS: an OBS-like publisher (libdatachannel, H.264) pushes a 512² stream; the
 * node encodes it once at full size and once per rendition, and serves a multivariant playlist.
 * The renditions run only while a player is here, and start late: the variants must still be
 * switchable at any segment — the same media sequence numbers, every segment of every variant
 * starting on a key frame at the same media time — and ffprobe reads the rendition at its size.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { HlsOutput } from '../../../media/index.ts';
import { trackSpans } from '../../helpers/fmp4.ts';
import { stampedH264 } from '../../helpers/h264Source.ts';
import { startObsPublishers } from '../../helpers/obsPublisher.ts';
import { until } from '../../helpers/until.ts';
import { PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer } from '../harness.ts';

const run = promisify(execFile);

t.test('the multivariant playlist offers the full encode and the half rendition; their segments line up frame for frame', { timeout: 120_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 512, height: 512 }, settings: { renditions: [{ name: 'half', scale: 0.5, bitrateKbps: 300 }] } });
  const pubs = startObsPublishers(t);
  const p = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 512, frames: 300 }) });
  t.equal(p.status, 201, `OBS-like WHIP POST → 201 (${p.body})`);
  const base = `${srv.baseUrl}/hls/${PLAYBACK_ID}`;
  const text = async (url: string) => {
    const r = await fetch(url);
    t.equal(r.status, 200, `GET ${url.slice(base.length)} → 200`);
    return r.text();
  };
  const out = () => srv.node.getStream(STREAM_ID)?.readers.find(HlsOutput);
  // Unwatched, the stream encodes once: three segments of the full encode and no rendition.
  await until('3 segments of the full encode', () => out(), (o) => (o?.packager.stats().segments ?? 0) >= 3, 30_000);
  t.same(srv.node.status(STREAM_ID)?.renditions, [], 'no rendition runs while no player is here');
  t.equal(out()?.variants.get('half')?.stats().segments, 0, 'the rendition\'s packager holds nothing');

  // The first player: the multivariant playlist comes once the rendition joined the full one's
  // timeline at a segment start and made a whole segment.
  const asked = performance.now();
  const master = await text(`${base}/master.m3u8`);
  t.comment(`first multivariant playlist in ${Math.round(performance.now() - asked)} ms`);
  // Four whole segments of each: enough to compare boundaries past the first.
  await until('4 segments of the rendition', () => out(), (o) => (o?.variants.get('half')?.stats().segments ?? 0) >= 4, 30_000);
  const inf = [...master.matchAll(/#EXT-X-STREAM-INF:([^\n]+)\n([^\n]+)/g)].map((m) => ({ attrs: m[1] ?? '', uri: m[2] ?? '' }));
  t.same(inf.map((v) => v.uri), ['index.m3u8', 'half/index.m3u8'], 'two variants: full, then the rendition');
  t.match(inf[0]?.attrs, /RESOLUTION=512x512/, 'full size');
  t.match(inf[1]?.attrs, /RESOLUTION=256x256/, 'half size');
  t.match(inf[0]?.attrs, /CODECS="avc1\.42[0-9a-f]{4},mp4a\.40\.2"/, 'CODECS from the SPS (constrained baseline) and AAC-LC');
  const bw = inf.map((v) => Number(/BANDWIDTH=(\d+)/.exec(v.attrs)?.[1]));
  t.ok((bw[1] ?? 0) > 0 && (bw[1] ?? 0) < (bw[0] ?? 0) / 2, `the rendition needs less than half the bandwidth (${bw.join(' vs ')} bit/s)`);
  t.ok((bw[1] ?? Infinity) < 600_000, `the rendition fits a 600 kb/s link (${bw[1]} bit/s peak)`);

  const full = await text(`${base}/index.m3u8`);
  const half = await text(`${base}/half/index.m3u8`);
  const segs = (pl: string) => [...pl.matchAll(/#EXTINF:([\d.]+),\n(seg\d+\.m4s)/g)].map((m) => ({ dur: Number(m[1]), uri: m[2] ?? '' }));
  const seq = (pl: string) => /#EXT-X-MEDIA-SEQUENCE:(\d+)/.exec(pl)?.[1];
  const [fs, hs] = [segs(full), segs(half)];
  const common = fs.filter((s) => hs.some((h) => h.uri === s.uri));
  t.ok(common.length >= 3, `the variants list the same segments (${fs.map((s) => s.uri).join(' ')} | ${hs.map((s) => s.uri).join(' ')})`);
  t.ok(Number(seq(half)) >= 3, `the rendition's segments carry the full encode's sequence numbers from where it joined (${seq(half)})`);
  // One key frame per segment target: a rendition's packager asking for its own, a few ms after
  // the full one's, once made the encoder add a second half a segment later.
  t.ok(fs.slice(1).every((x) => x.dur >= 0.8), `segments of ≈ 1 s, no extra key frames (${fs.map((x) => x.dur).join(' ')})`);

  const dir = mkdtempSync(join(tmpdir(), 'rv-rend-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const s of common.slice(-3)) {
    const [a, b] = await Promise.all([fetch(`${base}/${s.uri}`), fetch(`${base}/half/${s.uri}`)]);
    t.equal(a.status + b.status, 400, `${s.uri} of both variants served`);
    const [fa, fb] = [Buffer.from(await a.arrayBuffer()), Buffer.from(await b.arrayBuffer())];
    const [sa, sb] = [trackSpans(fa, 1), trackSpans(fb, 1)];
    // Same media time at the start (the same key frame); the end differs by a frame at most (the
    // last frame's duration is known only when the next one comes).
    t.equal(sb[0]?.start, sa[0]?.start, `${s.uri}: both start at media time ${sa[0]?.start}`);
    t.ok(Math.abs((sb.at(-1)?.end ?? 0) - (sa.at(-1)?.end ?? 0)) <= 3000, `${s.uri}: both end within a frame (${sa.at(-1)?.end} vs ${sb.at(-1)?.end})`);
    for (const [name, bytes] of [['full', fa], ['half', fb]] as const) {
      const initUri = /#EXT-X-MAP:URI="([^"]+)"/.exec(name === 'full' ? full : half)?.[1] ?? '';
      const init = Buffer.from(await (await fetch(`${base}/${name === 'full' ? '' : 'half/'}${initUri}`)).arrayBuffer());
      const file = join(dir, `${name}-${s.uri}.mp4`);
      writeFileSync(file, Buffer.concat([init, bytes]));
      const probe = await run('ffprobe', ['-v', 'error', '-select_streams', 'v', '-show_entries', 'stream=width,height:frame=key_frame', '-read_intervals', '%+#1', '-of', 'json', file]);
      const j = JSON.parse(probe.stdout) as { streams: { width: number; height: number }[]; frames: { key_frame: number }[] };
      const size = name === 'full' ? 512 : 256;
      t.same({ w: j.streams[0]?.width, h: j.streams[0]?.height }, { w: size, h: size }, `${name} ${s.uri}: ${size}×${size}`);
      t.equal(j.frames[0]?.key_frame, 1, `${name} ${s.uri} starts on a key frame`);
    }
  }
  const st = srv.node.status(STREAM_ID);
  const r = st?.renditions[0];
  t.same({ name: r?.name, w: r?.width, h: r?.height, running: r?.running }, { name: 'half', w: 256, h: 256, running: true }, 'status lists the running rendition');
  t.ok((r?.framesOut ?? 0) > 100, `the rendition encoded frames (${r?.framesOut}; missed ${r?.framesMissed})`);
  t.equal((await fetch(`${base}/quarter/index.m3u8`)).status, 404, 'an unknown rendition → 404');
});

t.test('RENDITIONS none: the multivariant playlist lists the full encode alone and no rendition runs', { timeout: 60_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256 }, settings: { renditions: [] } });
  const pubs = startObsPublishers(t);
  t.equal((await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 150 }) })).status, 201);
  const master = await (await fetch(`${srv.baseUrl}/hls/${PLAYBACK_ID}/master.m3u8`)).text();
  t.equal([...master.matchAll(/#EXT-X-STREAM-INF/g)].length, 1, 'one variant');
  t.match(master, /RESOLUTION=256x256[^\n]*\nindex\.m3u8/);
  t.same(srv.node.status(STREAM_ID)?.renditions, [], 'no rendition encoder');
});
