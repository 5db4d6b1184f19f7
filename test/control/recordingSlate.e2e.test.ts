/**
 * A recording holds the publisher's frames only, whether or not someone watches. On the real server
 * (API and media node, embedded store): a stream created with `record: true`; an OBS-like publisher
 * (libdatachannel, H.264) publishes, stops, and publishes again; then recording is turned off.
 *
 * - Watched (a receive-only WHEP viewer, libdatachannel, connected before the first publish): the
 *   outputs carry the slate before the first publish, through the time away and after the end, and
 *   the viewer keeps receiving it. None of it is in the recording: its duration is the time
 *   published (within one GOP), a discontinuity at the return (`EXT-X-DISCONTINUITY` there in its
 *   playlist; any other only where an output stall on a loaded machine cut a gap over 1 s), the
 *   MP4's length the same, and every frame of its MP4 is the publisher's (a slate frame is dimmed into Y 64…146;
 *   the publisher's frames are black around their blocks, Y ≈ 16).
 * - Unwatched: no slate runs; the same recording, as documented (the case that was always right).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer, type Json, type LiveServer } from '../helpers/liveServer.ts';
import { startObsPublishers, type ObsPublishers } from '../helpers/obsPublisher.ts';
import { frameLuma, probeRecording } from '../helpers/recordingProbe.ts';
import { until } from '../helpers/until.ts';

/** One GOP of the output: HLS segments (≈ 1 s) start on keyframes. */
const GOP_S = 1;
/** What a loaded machine adds to a measured interval (status polls, publisher teardown), s. */
const SLACK_S = 0.75;
/** Seconds of output each publish lasts. */
const PUBLISH_S = 4;
/** Seconds the outputs stay on the slate before the publisher comes back (≥ 2 HLS segments). */
const AWAY_S = 2.5;
/**
 * A slate frame's luma lies in Y 64…146 (Slate.ts: the greyed last frame, or plain Y 64), give or
 * take x264's ringing; every frame of the publisher's has black (Y ≈ 16) around its blocks.
 */
const isSlate = (y: { min: number; max: number }) => y.min >= 50 && y.max <= 170;

type Api = LiveServer['api'];

const status = async (api: Api, id: string): Promise<Json> => (await api('GET', `/v1/streams/${id}/status`)).body['data'] as Json;

/** Waits for the output of a publisher that started after `afterMs`, then for `seconds` of it; returns its start (ms epoch). */
async function publishedFor(api: Api, id: string, afterMs: number, seconds: number): Promise<number> {
  const s = await until(
    `${seconds} s of output after ${afterMs}`,
    () => status(api, id),
    (s) => {
      const start = (s['inference_status']?.['start_time'] as number | undefined) ?? 0;
      return start > afterMs && Date.now() - start >= seconds * 1000;
    },
    60_000,
  );
  return s['inference_status']['start_time'] as number;
}

/** Waits until the outputs have carried the slate for `seconds`. */
async function slateFor(api: Api, id: string, seconds: number): Promise<void> {
  let since = Infinity;
  await until(
    `the slate for ${seconds} s`,
    () => status(api, id),
    (s) => {
      if (s['output'] !== 'slate') since = Infinity;
      else since = Math.min(since, Date.now());
      return Date.now() - since >= seconds * 1000;
    },
    60_000,
  );
}

interface Outcome {
  rec: Json;
  /** Seconds the publisher's output was live (both publishes). */
  publishedS: number;
  /** ms epoch halfway through the time away (before it the first publish's segments start, after it the return's). */
  awayMidMs: number;
  playlist: string;
  mp4: string;
}

/**
 * Publish, stop, publish again, stop, recording off. `watch`: a WHEP viewer connected throughout,
 * and the slate is waited for before the first publish, while away and after the end.
 */
async function publishTwice(t: Test, server: LiveServer, pubs: ObsPublishers, watch: boolean): Promise<Outcome> {
  const { api } = server;
  const created = await api('POST', '/v1/streams', { params: { prompt: 'ink', width: 384, height: 384, skip_diffusion: true }, record: true });
  if (created.status !== 201) throw new Error(`stream not created: ${JSON.stringify(created.body)}`);
  const id = created.body['id'] as string;
  const url = `${server.url}/live/${id}/whip`;
  const token = created.body['stream_key'] as string;
  const source = await stampedH264({ size: 256, frames: 600, gop: 30 });

  let received = async () => 0;
  if (watch) {
    const viewer = await pubs.play({ url: created.body['output_stream_url'] as string });
    t.equal(viewer.status, 201, 'the viewer is answered');
    await pubs.waitState(viewer.id, 'connected', 20_000);
    received = async () => (await pubs.stats(viewer.id)).packetsReceived ?? 0;
    await slateFor(api, id, 1.5);
    t.pass('the viewer gets the slate before the first publish');
  }

  const first = await pubs.publish({ url, token, source });
  t.equal(first.status, 201, 'first publish');
  const start1 = await publishedFor(api, id, 0, PUBLISH_S);
  const stop1 = Date.now();
  await pubs.stop(first.id);
  if (watch) {
    const before = await received();
    await slateFor(api, id, AWAY_S);
    const after = await received();
    t.ok(after > before + 20, `the viewer keeps receiving while away (${after - before} packets of the slate)`);
  } else {
    // Unwatched, the outputs carry nothing while away (no slate to leave out).
    await until('the output stops', () => status(api, id), (s) => s['output'] === 'none', 20_000);
    t.equal((await status(api, id))['output'], 'none', 'no slate while nobody watches');
  }

  const second = await pubs.publish({ url, token, source });
  t.equal(second.status, 201, 'second publish');
  const start2 = await publishedFor(api, id, stop1, PUBLISH_S);
  const stop2 = Date.now();
  await pubs.stop(second.id);
  if (watch) await slateFor(api, id, 1.5);
  t.equal((await api('PATCH', `/v1/streams/${id}`, { record: false })).status, 200, 'recording off');

  const rec = await until(
    'the recording complete',
    async () => ((await api('GET', `/v1/streams/${id}/recordings`)).body['data'] as Json[]) ?? [],
    (list) => list.length === 1 && list[0]?.['state'] === 'complete',
    20_000,
  ).then((list) => list[0] as Json);

  const hls = await api('GET', new URL(rec['hls_url'] as string).pathname);
  const playlist = await (await fetch(new URL(hls.headers.get('location') as string, server.url))).text();
  const mp4Link = await api('GET', new URL(rec['mp4_url'] as string).pathname);
  const mp4 = join(server.dataDir, `${id}.mp4`);
  writeFileSync(mp4, Buffer.from(await (await fetch(new URL(mp4Link.headers.get('location') as string, server.url))).arrayBuffer()));
  return { rec, publishedS: (stop1 - start1 + (stop2 - start2)) / 1000, awayMidMs: (stop1 + start2) / 2, playlist, mp4 };
}

/** A VOD playlist's segments: wall-clock start (ms epoch), length (s), whether a discontinuity comes before. */
function segmentsOf(playlist: string): { wallMs: number; s: number; discontinuity: boolean }[] {
  const out: { wallMs: number; s: number; discontinuity: boolean }[] = [];
  let discontinuity = false;
  let wallMs = NaN;
  for (const line of playlist.split('\n')) {
    if (line === '#EXT-X-DISCONTINUITY') discontinuity = true;
    else if (line.startsWith('#EXT-X-PROGRAM-DATE-TIME:')) wallMs = Date.parse(line.slice(25));
    else if (line.startsWith('#EXTINF:')) {
      out.push({ wallMs, s: Number.parseFloat(line.slice(8)), discontinuity });
      discontinuity = false;
    }
  }
  return out;
}

/** What a recording of two publishes holds, watched or not: the publisher's frames, one discontinuity. */
async function checkLiveOnly(t: Test, o: Outcome): Promise<void> {
  const { rec, publishedS, awayMidMs, playlist, mp4 } = o;
  t.comment(`recording ${JSON.stringify({ duration: rec['duration'], segments: rec['segments'], discontinuities: rec['discontinuities'] })} for ${publishedS.toFixed(2)} s published`);
  t.ok(Math.abs(rec['duration'] - publishedS) <= GOP_S + SLACK_S, `duration ${rec['duration']} s is the time published, ${publishedS.toFixed(2)} s (within one GOP)`);
  // The return is a discontinuity; on a loaded machine an output stall over 1 s (HlsPackager) may
  // add one, always after a gap in wall-clock time; nothing else may.
  const segs = segmentsOf(playlist);
  const back = segs.findIndex((s) => s.wallMs >= awayMidMs);
  t.ok(back > 0 && segs[back]?.discontinuity, `EXT-X-DISCONTINUITY at the return (segment ${back} of ${segs.length})`);
  const others = segs
    .map((s, i) => ({ i, discontinuity: s.discontinuity, gapMs: i > 0 ? s.wallMs - (segs[i - 1]!.wallMs + segs[i - 1]!.s * 1000) : 0 }))
    .filter((s) => s.discontinuity && s.i !== back);
  t.same(others.filter((s) => s.gapMs < 900), [], `no other discontinuity but after an output stall (${others.length} such)`);
  t.equal(rec['discontinuities'], 1 + others.length, `discontinuities: ${rec['discontinuities']}, the return${others.length ? ' and the stalls' : ''}`);
  const extinf = [...playlist.matchAll(/#EXTINF:([\d.]+),/g)].reduce((a, m) => a + Number(m[1]), 0);
  t.ok(Math.abs(extinf - rec['duration']) < 0.05, `the playlist sums to ${extinf.toFixed(3)} s`);

  const p = await probeRecording(mp4);
  t.ok(Math.abs(p.duration - publishedS) <= GOP_S + SLACK_S, `ffprobe: the MP4 lasts ${p.duration} s for ${publishedS.toFixed(2)} s published`);
  t.ok(p.packets[0]?.key, 'the MP4 starts on a keyframe');
  t.equal(p.decodedFrames, p.packets.length, `all ${p.packets.length} frames decode`);
  const luma = await frameLuma(mp4);
  t.equal(luma.length, p.packets.length, 'every frame measured');
  const slate = luma.map((y, i) => ({ i, ...y })).filter(isSlate);
  t.same(slate, [], `no slate frame among the MP4's ${luma.length} frames (luma within Y 50…170)`);
}

t.test('watched: the recording holds the publisher’s frames only, with a discontinuity at the return', { timeout: 240_000 }, async (t) => {
  const server = await startLiveServer(t, { env: { ROLES: 'api,media', WEBRTC_INTERFACES: '127.0.0.1' } });
  const pubs = startObsPublishers(t);
  await checkLiveOnly(t, await publishTwice(t, server, pubs, true));
});

t.test('unwatched: the same, as documented (no slate runs)', { timeout: 240_000 }, async (t) => {
  const server = await startLiveServer(t, { env: { ROLES: 'api,media', WEBRTC_INTERFACES: '127.0.0.1' } });
  const pubs = startObsPublishers(t);
  await checkLiveOnly(t, await publishTwice(t, server, pubs, false));
});
