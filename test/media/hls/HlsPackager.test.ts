/**
 * HlsPackager on real x264 output (EncoderBin, real GStreamer) replayed with synthetic arrival
 * times, so segment/part timing is deterministic: window bounds, part and segment rules, the
 * publisher-gap discontinuity, a timeline without holes across gaps and resolution changes,
 * silence padding without publisher audio, slate frames (the live run of each segment, a segment
 * at the first live keyframe after the slate), and close().
 */
import pino from 'pino';
import t from 'tap';
import { EncoderBin, type EncodedAccessUnit } from '../../../media/gst/EncoderBin.ts';
import { HlsPackager, type CompletedSegment } from '../../../media/hls/HlsPackager.ts';
import { trackSpans } from '../../helpers/fmp4.ts';

/** `n` real access units of a moving gradient, IDR every `keyInt` frames. */
async function encode(n: number, keyInt: number, W = 128, H = 96): Promise<EncodedAccessUnit[]> {
  const aus: EncodedAccessUnit[] = [];
  let done: () => void = () => undefined;
  const finished = new Promise<void>((r) => (done = r));
  const enc = new EncoderBin({
    width: W,
    height: H,
    fps: 30,
    bitrateKbps: 300,
    keyIntFrames: keyInt,
    keyUnitMinIntervalMs: 0,
    logger: pino({ level: 'silent' }),
    onAccessUnit: (au) => {
      aus.push(au);
      if (aus.length >= n) done();
    },
  });
  try {
    const data = new Uint8Array(W * H * 3);
    for (let i = 0; i < n + 10 && aus.length < n; i++) {
      for (let p = 0; p < data.length; p++) data[p] = (p + i * 7) & 0xff;
      enc.push({ width: W, height: H, data, ptsMs: i * 33 });
      // One frame per macrotask: the encoder's appsrc keeps 2, so pace the pushes on its output.
      const target = Math.min(i + 1, n);
      while (aus.length < target - 1) await new Promise((r) => setTimeout(r, 2));
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([finished, new Promise((_, rej) => (timer = setTimeout(() => rej(new Error('encoder too slow')), 20_000)))]);
    clearTimeout(timer);
  } finally {
    enc.close();
  }
  return aus.slice(0, n);
}

function packager(opts: Partial<ConstructorParameters<typeof HlsPackager>[0]> = {}): { hls: HlsPackager; keyRequests: () => number } {
  let requests = 0;
  const hls = new HlsPackager({
    partTargetMs: 200,
    segmentTargetMs: 1000,
    windowSegments: 4,
    partSegments: 2,
    nominalFrameMs: 1000 / 30,
    logger: pino({ level: 'silent' }),
    requestKeyUnit: () => requests++,
    ...opts,
  });
  return { hls, keyRequests: () => requests };
}

const frameMs = 1000 / 30;

t.test('segments start on keyframes, parts stay within PART-TARGET, the window slides and stays bounded', { timeout: 60_000 }, async (t) => {
  const aus = await encode(300, 30); // 10 s at 30 fps, IDR each second
  const { hls, keyRequests } = packager();
  t.teardown(() => hls.close());
  aus.forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 10_000 + i * frameMs }));
  const pl = hls.playlist('ll');
  const segs = [...pl.matchAll(/#EXTINF:([\d.]+),\nseg(\d+)\.m4s/g)].map((m) => ({ dur: Number(m[1]), msn: Number(m[2]) }));
  t.equal(segs.length, 4, 'windowSegments complete segments listed');
  t.equal(Number(/#EXT-X-MEDIA-SEQUENCE:(\d+)/.exec(pl)?.[1]), segs[0]?.msn, 'MEDIA-SEQUENCE is the first listed segment');
  t.same(
    segs.map((s) => s.msn),
    segs.map((_, i) => (segs[0]?.msn ?? 0) + i),
    'consecutive msns',
  );
  for (const s of segs) t.ok(Math.abs(s.dur - 1) < 0.01, `segment ${s.msn} is one GOP (${s.dur} s)`);
  const parts = [...pl.matchAll(/#EXT-X-PART:DURATION=([\d.]+),URI="part(\d+)\.(\d+)\.m4s"(,INDEPENDENT=YES)?/g)];
  t.ok(parts.every((p) => Number(p[1]) <= 0.2 + 1e-9), 'every part ≤ 0.2 s');
  t.ok(parts.filter((p) => p[3] === '0').every((p) => p[4] !== undefined), "each segment's first part is INDEPENDENT=YES");
  const listedParts = new Set(parts.map((p) => Number(p[2])));
  t.ok(listedParts.size <= 3, 'parts only for the newest partSegments segments + the open one');
  t.ok(keyRequests() >= 8, 'a key unit is requested near each segment target');
  const stats = hls.stats();
  t.ok(stats.bytesHeld < 2_000_000, `memory bounded (${stats.bytesHeld} bytes held)`);
  t.equal(hls.segment(0), undefined, 'segments that left the window are gone');
  t.ok(hls.segment(segs[0]?.msn ?? -1), 'listed segments are served');
});

t.test('PART-HOLD-BACK: 3 parts unless set; a setting below the spec\'s 2 parts is raised to 2', { timeout: 60_000 }, async (t) => {
  const aus = await encode(30, 30);
  const holdBack = (o: Partial<ConstructorParameters<typeof HlsPackager>[0]>): number => {
    const { hls } = packager(o);
    aus.forEach((au, i) => hls.pushVideo({ ...au, ptsMs: i * frameMs }));
    const pl = hls.playlist('ll');
    hls.close();
    return Number(/PART-HOLD-BACK=([\d.]+)/.exec(pl)?.[1]);
  };
  t.equal(holdBack({}), 0.6, 'default: 3 × the 200 ms part target');
  t.equal(holdBack({ partHoldBackMs: 1100 }), 1.1, 'set for a cache: 1.1 s');
  t.equal(holdBack({ partHoldBackMs: 100 }), 0.4, 'below 2 parts: 2 parts');
  t.equal(holdBack({ partTargetMs: 100 }), 0.3, '100 ms parts: 0.3 s');
});

t.test('100 ms parts (HLS_PART_TARGET_MS=100): every part within PART-TARGET=0.100, whole frames, segments still one GOP', { timeout: 60_000 }, async (t) => {
  const aus = await encode(150, 30); // 5 s at 30 fps, IDR each second
  const { hls } = packager({ partTargetMs: 100 });
  t.teardown(() => hls.close());
  aus.forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 10_000 + i * frameMs }));
  const pl = hls.playlist('ll');
  t.match(pl, /#EXT-X-PART-INF:PART-TARGET=0\.100\n/, 'PART-TARGET says 0.1 s');
  const parts = [...pl.matchAll(/#EXT-X-PART:DURATION=([\d.]+),URI="part(\d+)\.(\d+)\.m4s"/g)].map((m) => Number(m[1]));
  t.ok(parts.length >= 20, `parts listed (${parts.length})`);
  t.ok(parts.every((d) => d <= 0.1 + 1e-9), `every part ≤ 0.1 s (${[...new Set(parts.map((d) => d.toFixed(3)))].join(', ')})`);
  t.ok(parts.every((d) => d >= frameMs / 1000 - 1e-3), 'and at least one frame');
  const segs = [...pl.matchAll(/#EXTINF:([\d.]+),/g)].map((m) => Number(m[1]));
  for (const d of segs) t.ok(Math.abs(d - 1) < 0.01, `segment of one GOP (${d} s)`);
});

t.test('without publisher audio, parts carry silent AAC covering the video; after a publisher gap the next segment follows EXT-X-DISCONTINUITY', { timeout: 60_000 }, async (t) => {
  const aus = await encode(90, 30);
  const { hls } = packager({ windowSegments: 6 });
  t.teardown(() => hls.close());
  hls.audioExpected = false;
  aus.slice(0, 60).forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 10_000 + i * frameMs }));
  hls.flush(); // the publisher left
  aus.slice(60).forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 20_000 + i * frameMs }));
  const pl = hls.playlist('ll');
  t.match(pl, /seg1\.m4s\n#EXT-X-DISCONTINUITY\n/, 'discontinuity before the first segment of the new publisher');
  // ≈ 2 s of video before the gap → ≈ 94 AAC frames of 21.3 ms of silence.
  t.ok(hls.stats().audioFramesSilent >= 90, `silence padded (${hls.stats().audioFramesSilent} frames)`);
});

t.test('audio that keeps coming over 200 ms early is placed again after a second, not dropped for good', { timeout: 60_000 }, async (t) => {
  const aus = await encode(180, 30);
  const { hls } = packager({ windowSegments: 10 });
  t.teardown(() => hls.close());
  hls.audioExpected = true;
  const frame = new Uint8Array([0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c]);
  // Audio on the video's clock for 1.5 s, then 800 ms behind it (a clock that disagrees): as
  // placed, every frame is early by more than the 200 ms the packager allows.
  let audioAt = 10_000;
  let at4s = hls.stats();
  aus.forEach((au, i) => {
    const v = 10_000 + i * frameMs;
    hls.pushVideo({ ...au, ptsMs: v });
    for (; audioAt <= v; audioAt += 1024 / 48) hls.pushAudio(frame, audioAt >= 11_500 ? audioAt - 800 : audioAt);
    if (i === 120) at4s = hls.stats();
  });
  const end = hls.stats();
  t.equal(end.audioResyncs, 1, 'placed again once');
  t.ok(end.audioFramesDropped >= 40 && end.audioFramesDropped <= 47, `${end.audioFramesDropped} frames dropped first (≈ 1 s)`);
  t.equal(end.audioFramesDropped - at4s.audioFramesDropped, 0, 'none dropped in the last 2 s');
  t.equal(end.audioFramesSilent - at4s.audioFramesSilent, 0, 'nor any silence padded');
});

t.test('the media timeline has no hole across a stall, a publisher gap and a resolution change (players would stall at it)', { timeout: 60_000 }, async (t) => {
  const aus = await encode(90, 30);
  const bigger = await encode(30, 30, 160, 120);
  const { hls } = packager({ windowSegments: 30 });
  t.teardown(() => hls.close());
  hls.audioExpected = false;
  aus.slice(0, 35).forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 10_000 + i * frameMs }));
  // A 3 s stall of the same encoder; it resumes mid-GOP (frames 40–59 wait for the key frame at 60).
  aus.slice(40).forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 10_000 + 35 * frameMs + 3000 + i * frameMs }));
  hls.flush(); // the publisher left
  // 5 s later a new encoder at another size.
  bigger.forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 30_000 + i * frameMs }));
  hls.flush();
  const pl = hls.playlist('ll');
  const msns = [...pl.matchAll(/^seg(\d+)\.m4s$/gm)].map((m) => Number(m[1]));
  t.equal((pl.match(/#EXT-X-DISCONTINUITY\n/g) ?? []).length, 2, 'a discontinuity after the stall and before the new encoder');
  const spans = msns.flatMap((msn) => trackSpans(hls.segment(msn) ?? Buffer.alloc(0), 1));
  t.ok(spans.length > 10, `${spans.length} video fragments`);
  const holes = spans.slice(1).map((s, i) => s.start - (spans[i] as { end: number }).end).filter((d) => d !== 0);
  t.same(holes, [], 'every video fragment starts where the one before it ended');
  const mediaS = ((spans.at(-1)?.end ?? 0) - (spans[0]?.start ?? 0)) / 90_000;
  // 35 + 30 (from the key frame at 60) + 30 frames at 30 fps; the stall and the gap are not in it.
  t.ok(Math.abs(mediaS - 95 / 30) < 0.1, `media time is the frames' (${mediaS.toFixed(3)} s)`);
  const audio = msns.flatMap((msn) => trackSpans(hls.segment(msn) ?? Buffer.alloc(0), 2));
  const audioHoles = audio.slice(1).map((s, i) => (s.start - (audio[i] as { end: number }).end) / 48).filter((ms) => Math.abs(ms) > 22);
  t.same(audioHoles, [], 'the silent audio follows within one AAC frame (21.3 ms)');
  // What was cut is counted for operators (reverie_media_hls_cut*): the arrival span less the media time.
  const arrivalS = (30_000 + 29 * frameMs + frameMs - 10_000) / 1000;
  const { cuts, cutSeconds } = hls.stats();
  t.equal(cuts, 2, 'two cuts: the stall and the gap before the new encoder');
  t.ok(Math.abs(cutSeconds - (arrivalS - mediaS)) < 0.05, `${cutSeconds.toFixed(3)} s cut out of ${arrivalS.toFixed(3)} s of arrival time (${mediaS.toFixed(3)} s of media)`);
});

t.test('a rendition\'s packager started late joins its leader at a segment start: the same msn, media time and discontinuity number from there on', { timeout: 60_000 }, async (t) => {
  const aus = await encode(300, 30);
  const { hls: leader } = packager({ windowSegments: 12 });
  const { hls: variant } = packager({ windowSegments: 12, leader });
  t.teardown(() => {
    leader.close();
    variant.close();
  });
  // The leader's timeline: a 3 s stall (cut out) and a publisher gap (a discontinuity) before the
  // rendition starts; a second publisher gap after it.
  const pts = (i: number) => (i < 60 ? 10_000 + i * frameMs : i < 120 ? 13_000 + i * frameMs : i < 220 ? 30_000 + i * frameMs : 45_000 + i * frameMs);
  for (let i = 0; i < 300; i++) {
    if (i === 120 || i === 220) leader.flush();
    if (i === 220) variant.flush();
    leader.pushVideo({ ...(aus[i] as EncodedAccessUnit), ptsMs: pts(i) });
    // The rendition starts at frame 140 (mid-segment) with a key frame of its own encoder's (the
    // first frame of an x264 is one), which starts none of the leader's segments; the leader gets
    // each frame before the rendition does, as from the stream's encoder.
    if (i === 140) variant.pushVideo({ ...(aus[0] as EncodedAccessUnit), ptsMs: pts(i) });
    else if (i > 140) variant.pushVideo({ ...(aus[i] as EncodedAccessUnit), ptsMs: pts(i) });
  }
  leader.flush();
  variant.flush();
  const segs = (pl: string) => {
    // Each segment's discontinuity number (§6.2.1): the sequence plus the tags before it.
    let disc = Number(/#EXT-X-DISCONTINUITY-SEQUENCE:(\d+)/.exec(pl)?.[1]);
    const out = new Map<number, { dur: string; disc: number }>();
    for (const line of pl.split('\n')) {
      if (line === '#EXT-X-DISCONTINUITY') disc++;
      const m = /^#EXTINF:([\d.]+),$/.exec(line);
      if (m) out.set(-1, { dur: m[1] ?? '', disc });
      const u = /^seg(\d+)\.m4s$/.exec(line);
      if (u) out.set(Number(u[1]), out.get(-1) as { dur: string; disc: number });
    }
    out.delete(-1);
    return out;
  };
  const [ls, vs] = [segs(leader.playlist('ll')), segs(variant.playlist('ll'))];
  const first = Math.min(...vs.keys());
  t.equal(first, 5, `the rendition starts with the leader's segment at its first shared key frame (frame 150: msn 5 after the 3 + 2 before; leader ${[...ls.keys()].join(',')})`);
  t.ok(vs.size >= 4, `${vs.size} segments of the rendition`);
  for (const [msn, v] of vs) {
    const l = ls.get(msn);
    t.same(v, l, `seg${msn}: duration ${v.dur} s and discontinuity number ${v.disc} as the leader's`);
    const [a, b] = [trackSpans(leader.segment(msn) ?? Buffer.alloc(0), 1), trackSpans(variant.segment(msn) ?? Buffer.alloc(0), 1)];
    t.same(b.map((x) => [x.start, x.end]), a.map((x) => [x.start, x.end]), `seg${msn}: the same media times (${a[0]?.start}…${a.at(-1)?.end})`);
  }
  // The stall and the publisher gap before the join: 2; the gap after it: 3.
  t.same([...new Set([...vs.values()].map((v) => v.disc))], [2, 3], 'the discontinuities before the join count, the one after it is followed');
});

t.test('a segment and its parts stay served one segment after they leave the playlist (a player reading a second-old playlist finds them)', { timeout: 60_000 }, async (t) => {
  const aus = await encode(300, 30);
  const { hls } = packager();
  t.teardown(() => hls.close());
  aus.forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 10_000 + i * frameMs }));
  const pl = hls.playlist('ll');
  const listed = [...pl.matchAll(/\nseg(\d+)\.m4s/g)].map((m) => Number(m[1]));
  const withParts = [...new Set([...pl.matchAll(/URI="part(\d+)\.\d+\.m4s"/g)].map((m) => Number(m[1])))];
  const first = listed[0] ?? -1;
  const firstParts = withParts[0] ?? -1;
  t.ok(first > 2 && firstParts > first, `the window slid (segments from ${first}, parts from ${firstParts})`);
  t.ok(hls.segment(first - 1), 'the segment that left the window last is still served');
  t.equal(hls.segment(first - 2), undefined, 'the one before it is gone');
  t.ok(await hls.part(firstParts - 1, 0, 10), "the parts of the segment whose parts left the playlist last are still served");
  t.equal(await hls.part(firstParts - 2, 0, 10), undefined, 'older parts are gone');
  t.ok(hls.stats().bytesHeld < 2_000_000, `memory stays bounded (${hls.stats().bytesHeld} bytes)`);
});

t.test('blocking waits resolve when the part appears and fail on close', { timeout: 60_000 }, async (t) => {
  const aus = await encode(40, 30);
  const { hls } = packager();
  aus.slice(0, 20).forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 10_000 + i * frameMs }));
  const parts = hls.playlist('ll').match(/#EXT-X-PART:/g)?.length ?? 0;
  const waiting = hls.waitFor(0, parts, 5000);
  let settled = false;
  void waiting.then(() => (settled = true));
  await new Promise((r) => setImmediate(r));
  t.notOk(settled, 'held while the part does not exist');
  aus.slice(20).forEach((au, i) => hls.pushVideo({ ...au, ptsMs: 10_000 + (20 + i) * frameMs }));
  t.equal(await waiting, true, 'resolved once the part was produced');
  const never = hls.waitFor(50, undefined, 5000);
  hls.close();
  t.equal(await never, false, 'close() fails pending waits');
  t.equal(hls.segment(0), undefined, 'close() drops the segments');
  hls.close();
  t.pass('close() is idempotent');
});

t.test('slate frames: players get them alike; each segment says which leading bytes are live, and the first live keyframe after the slate starts a segment', { timeout: 60_000 }, async (t) => {
  const aus = await encode(80, 10); // an IDR every 10 frames (333 ms)
  const completed: CompletedSegment[] = [];
  const { hls, keyRequests } = packager({ windowSegments: 10, onSegment: (s) => completed.push(s) });
  t.teardown(() => hls.close());
  // Live 0–24, the slate 25–44 (the publisher away, a viewer watching), live again from 45.
  const slate = (i: number) => i >= 25 && i < 45;
  let asked = -1;
  aus.forEach((au, i) => {
    const before = keyRequests();
    hls.pushVideo({ ...au, ptsMs: 10_000 + i * frameMs }, slate(i));
    if (asked < 0 && i >= 45 && keyRequests() > before) asked = i;
  });
  hls.flush();
  const frames = (ms: number) => Math.round(ms / frameMs);
  const shape = completed.map((s) => ({ frames: frames(s.durationMs), liveFrames: frames(s.liveDurationMs), whole: s.liveBytes === s.bytes.length, none: s.liveBytes === 0 }));
  t.comment(JSON.stringify(shape));
  t.same(
    shape.slice(0, 4),
    [
      { frames: 20, liveFrames: 20, whole: true, none: false }, // live 0–19
      { frames: 20, liveFrames: 5, whole: false, none: false }, // live 20–24, then the slate
      { frames: 10, liveFrames: 0, whole: false, none: true }, // the slate 40–44, live 45–49 (they reference the slate)
      { frames: 20, liveFrames: 20, whole: true, none: false }, // from the live keyframe at 50, 333 ms into the segment
    ],
    'segment lengths and their live runs',
  );
  t.ok(asked >= 45 && asked <= 47, `a key unit asked as the live frames came back (frame ${asked})`);
  const mixed = completed[1] as CompletedSegment;
  t.equal(mixed.bytes.toString('latin1', mixed.liveBytes + 4, mixed.liveBytes + 8), 'moof', 'the live run ends where a fragment starts');
  const liveSpan = trackSpans(mixed.bytes.subarray(0, mixed.liveBytes), 1).reduce((n, s) => n + s.end - s.start, 0);
  t.equal(Math.round(liveSpan / 3000), 5, 'its fragments hold the 5 live frames');
  t.notMatch(hls.playlist('ll'), /#EXT-X-DISCONTINUITY\n/, 'players see one continuous stream (slate and live alike)');
});
