/**
 * A change locked to the soundtrack's beat, seen where a viewer sees and hears it: an OBS-like
 * publisher (libdatachannel, H.264 + Opus silence) streams, the node plays a take as the stream's
 * soundtrack (a click on every beat of 120 bpm, so the beat heard is unmistakable), and a param
 * change is scheduled on each beat as the control socket's `on_beat` does with the song's tempo
 * (StreamControl.nextBeat from the tempo whose phase is the take's start). The processor paints
 * each frame bright or dark by the seed's parity, and each beat's change flips it.
 *
 * The viewer is Chromium over WHEP. It takes both tracks' encoded frames with their RTP timestamps
 * (encoded insertable streams) and decodes them itself with WebCodecs: every Opus frame (the first
 * sample of each click is the beat heard, at its RTP time) and every video frame (the first frame of
 * each flip, at its RTP time). RTP times become capture times on the node's clock by the sender
 * reports of the same session (RTCP SR, media/webrtc/SenderReport.ts): the beat heard and the change seen
 * must lie within one frame interval of each other.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { Frame, FrameProcessorFactory } from '../../media/index.ts';
import type { ParamsChange } from '../../native/params/index.ts';
import { rtpDelta } from '../../media/webrtc/RtpArrival.ts';
import type { ReportedTime } from '../../media/webrtc/SenderReport.ts';
import { StreamControl, type Tempo } from '../../streams/StreamControl.ts';
import { writeWav } from '../../songs/WavWriter.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { until } from '../helpers/until.ts';
import { STREAM_ID, STREAM_KEY, startMediaServer } from './harness.ts';

const RATE = 48_000;
const BPM = 120;
const BEAT_MS = 60_000 / BPM;
/** Beats whose change is scheduled and checked. */
const BEATS = 12;
/** The take: 8 s of clicks, looping. */
const TAKE_S = 8;
/** What the processor paints (all channels, or Y): the two sides of a flip lie far apart after x264. */
const BRIGHT = 200;
const DARK = 40;
/**
 * What the comparison may miss by beside the frame interval, ms: the audio's capture clock is
 * placed by its least-delayed packet (the mix's 10 ms tick and the encoder's pipeline leave 0.6–1.6
 * ms here). Before the node took the Opus encoder's lookahead off, the beat was heard 7–8 ms after
 * its place; before changes landed by output time, seen up to a frame and 17 ms after the beat.
 */
const CLOCK_TOLERANCE_MS = 4;

interface BeatLog {
  /** RTP time of each click's first sample in the decoded Opus. */
  onsets: number[];
  /** [RTP time, mean red of the frame's centre] per decoded video frame, in order. */
  frames: [number, number][];
  codec: string | null;
  errors: string[];
  /** Opus frames fed to the decoder, and the sources they came from (the publisher's, then the mix). */
  audioChunks: number;
  audioSources: number;
}

declare global {
  interface Window {
    playBeat(url: string): Promise<{ status: number; location: string | null }>;
    beatLog(): BeatLog;
  }
}

/** The viewer's page: WHEP, both tracks' encoded frames decoded by WebCodecs, as they arrive. */
const PLAY_BEAT = `
window.playBeat = async (url) => {
  const pc = new RTCPeerConnection({ encodedInsertableStreams: true });
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  const log = { onsets: [], frames: [], codec: null, errors: [], audioChunks: 0, audioSources: 0 };
  window.beatLog = () => log;
  const rtpOf = (f) => (f.getMetadata().rtpTimestamp ?? f.timestamp) >>> 0;
  // Audio chunks carry their RTP time (from the first, unwrapped) as the decoder's timestamp, in µs:
  // the decoded audio keeps it, however the decoder counts. Video frames keep theirs beside a count.
  let audioFirst = null;
  let audioLast = 0;
  const AUDIO = { codec: 'opus', sampleRate: 48000, numberOfChannels: 2 };
  const videoRtp = new Map();
  let quiet = 0;
  const audio = new AudioDecoder({
    output: (d) => {
      const rtp = (audioFirst + Math.round((d.timestamp * 48) / 1000)) >>> 0;
      const x = new Float32Array(d.numberOfFrames);
      d.copyTo(x, { planeIndex: 0, format: 'f32-planar' });
      d.close();
      // A click's first sample: over 0.1 after at least 200 ms under it.
      for (let i = 0; i < x.length; i++) {
        if (Math.abs(x[i]) > 0.1) { if (quiet >= 9600) log.onsets.push((rtp + i) >>> 0); quiet = 0; } else quiet++;
      }
    },
    error: (e) => log.errors.push('audio: ' + e.message),
  });
  audio.configure(AUDIO);
  const canvas = new OffscreenCanvas(16, 16);
  const g = canvas.getContext('2d', { willReadFrequently: true });
  let video = null;
  let keyed = false;
  let n = 0;
  const feed = (kind, f) => {
    const rtp = rtpOf(f);
    const data = new Uint8Array(f.data.slice(0));
    if (kind === 'audio') {
      // A new source under the same SSRC (the soundtrack's mix starting): a fresh decoder and count.
      if (audioFirst === null || Math.abs((rtp - audioLast) | 0) > 48000) {
        if (audioFirst !== null) { audio.reset(); audio.configure(AUDIO); }
        log.audioSources++;
        audioFirst = rtp;
      }
      audioLast = rtp;
      log.audioChunks++;
      const ticks = ((rtp - audioFirst) | 0);
      audio.decode(new EncodedAudioChunk({ type: 'key', timestamp: Math.round((ticks * 1000) / 48), data }));
    } else if (video) {
      if (f.type === 'key') keyed = true;
      if (!keyed) return;
      const ts = (n++) * 33333;
      videoRtp.set(ts, rtp);
      video.decode(new EncodedVideoChunk({ type: f.type === 'key' ? 'key' : 'delta', timestamp: ts, data }));
    }
  };
  pc.ontrack = (e) => {
    const kind = e.track.kind;
    const { readable, writable } = e.receiver.createEncodedStreams();
    readable.pipeThrough(new TransformStream({ transform(f, c) { try { feed(kind, f); } catch (err) { log.errors.push(kind + ': ' + err.message); } c.enqueue(f); } })).pipeTo(writable);
  };
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((r) => { if (pc.iceGatheringState === 'complete') r(); else pc.addEventListener('icegatheringstatechange', () => pc.iceGatheringState === 'complete' && r()); setTimeout(r, 2000); });
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  const body = await res.text();
  if (res.status !== 201) return { status: res.status, location: null };
  // The video codec the node answered with: its first payload type on the m=video line.
  const m = /m=video \\d+ \\S+ (\\d+)/.exec(body);
  const name = m && new RegExp('a=rtpmap:' + m[1] + ' ([\\\\w-]+)/').exec(body);
  const fmtp = m && new RegExp('a=fmtp:' + m[1] + ' .*profile-level-id=([0-9a-fA-F]{6})').exec(body);
  log.codec = name ? (name[1].toUpperCase() === 'VP8' ? 'vp8' : 'avc1.' + (fmtp ? fmtp[1] : '42e01f')) : null;
  if (log.codec) {
    video = new VideoDecoder({
      output: (fr) => {
        const rtp = videoRtp.get(fr.timestamp);
        videoRtp.delete(fr.timestamp);
        g.drawImage(fr, fr.displayWidth / 4, fr.displayHeight / 4, fr.displayWidth / 2, fr.displayHeight / 2, 0, 0, 16, 16);
        fr.close();
        if (rtp === undefined) { log.errors.push('video output without its RTP time'); return; }
        const px = g.getImageData(0, 0, 16, 16).data;
        let sum = 0;
        for (let i = 0; i < px.length; i += 4) sum += px[i];
        log.frames.push([rtp, sum / (px.length / 4)]);
      },
      error: (e) => log.errors.push('video: ' + e.message),
    });
    video.configure({ codec: log.codec, optimizeForLatency: true });
  }
  await pc.setRemoteDescription({ type: 'answer', sdp: body });
  return { status: res.status, location: res.headers.get('location') };
};
`;

/** A processor that paints each frame by the seed's parity (odd bright, even dark), and passes its time on. */
const paintBySeed: FrameProcessorFactory = async (initial) => {
  let seed = Number(initial.seed ?? 0);
  return {
    process: async (f: Frame) => {
      const v = seed % 2 === 1 ? BRIGHT : DARK;
      const data = new Uint8Array(f.data.length);
      if (f.format === 'I420') {
        data.fill(v, 0, f.width * f.height);
        data.fill(128, f.width * f.height);
      } else data.fill(v);
      return { ...f, data };
    },
    update: ({ target, plan }: ParamsChange) => {
      if (plan.hot.includes('seed') || plan.reload.includes('seed')) seed = Number(target.seed);
      const hot = [...plan.hot, ...plan.reload];
      return { mode: hot.length > 0 ? 'hot' : 'none', hot, reload: [] };
    },
    close: () => undefined,
  };
};

/** The take: a 5 ms 3 kHz click, decaying, on the first sample of every beat. */
function clickTake(): Buffer {
  const n = TAKE_S * RATE;
  const L = new Float32Array(n);
  const beat = (BEAT_MS / 1000) * RATE;
  for (let at = 0; at < n; at += beat) {
    for (let i = 0; i < 240; i++) L[at + i] = 0.6 * Math.sin((2 * Math.PI * 3000 * i) / RATE) * Math.exp(-i / 80) + (i === 0 ? 0.6 : 0);
  }
  return writeWav(L, L, n, RATE);
}


/** Capture time (node clock, epoch ms) of RTP time `rtp` by the report nearest it. */
function captureMs(reports: ReportedTime[], rtp: number, hz: number): number {
  let best: ReportedTime | undefined;
  for (const r of reports) if (!best || Math.abs(rtpDelta(rtp, r.rtp)) < Math.abs(rtpDelta(rtp, best.rtp))) best = r;
  if (!best) return NaN;
  return best.ntpMs + (rtpDelta(rtp, best.rtp) * 1000) / hz;
}

t.test("a change on the soundtrack's beat is seen within one frame interval of the beat heard, in one WHEP viewer's decoded media", { timeout: 120_000 }, async (t) => {
  const songsDir = mkdtempSync(join(tmpdir(), 'rv-beat-'));
  t.teardown(() => rmSync(songsDir, { recursive: true, force: true }));
  mkdirSync(join(songsDir, 'sng_beat'));
  writeFileSync(join(songsDir, 'sng_beat', '1.wav'), clickTake());

  const srv = await startMediaServer(t, { params: { width: 256, height: 256, seed: 0 }, createProcessor: paintBySeed, songsDir });
  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 1800, gop: 30 }) });
  t.equal(pub.status, 201, pub.body);

  const ctx = await launchChromium(t, { fakeMedia: false });
  const page = await ctx.newPage();
  await page.goto(`${srv.baseUrl}/peer.html`);
  await page.evaluate(PLAY_BEAT);
  const played = await page.evaluate((url) => window.playBeat(url), srv.whepUrl);
  t.equal(played.status, 201, 'WHEP viewer answered');
  const entry = srv.node.getSession((played.location ?? '').split('/').pop() ?? '');
  if (entry?.kind !== 'whep') throw new Error('no WHEP session');
  await until('the viewer decodes frames', () => page.evaluate(() => window.beatLog().frames.length), (n) => n >= 30, 30_000);

  // The soundtrack starts on a whole second, a second from now; the tempo's phase is its first sample.
  const startAt = Math.ceil(Date.now() / 1000) * 1000 + 1000;
  t.ok(await srv.node.setSoundtrack(STREAM_ID, { songId: 'sng_beat', take: 1, wavKey: 'songs/sng_beat/1.wav', startAt, loop: true, gainDb: 0, duckPublisherDb: 0 }), 'the node plays the take');
  const tempo: Tempo = { bpm: BPM, phase: startAt, beatsPerBar: 4, songId: 'sng_beat' };
  const beats: number[] = [];
  // From the second beat after the start (the viewer's audio is flowing by then), each on the next.
  let due = StreamControl.nextBeat(tempo, 1, startAt + BEAT_MS / 2);
  for (let k = 1; k <= BEATS; k++, due = StreamControl.nextBeat(tempo, 1, due)) {
    beats.push(due);
    t.ok(srv.node.scheduleParams(STREAM_ID, { id: `beat${k}`, params: { seed: k }, applyAt: due }), `beat ${k} scheduled`);
  }

  // The sender reports of the session while it plays (one a second per track).
  const reports = { video: [] as ReportedTime[], audio: [] as ReportedTime[] };
  const lastBeat = beats[beats.length - 1] as number;
  while (Date.now() < lastBeat + 1500) {
    for (const kind of ['video', 'audio'] as const) {
      const r = entry.session.lastReports[kind];
      if (r && !reports[kind].some((x) => x.rtp === r.rtp)) reports[kind].push({ ...r });
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const log = await page.evaluate(() => window.beatLog());
  t.same(log.errors, [], 'the page decoded without errors');
  t.comment(`viewer: ${log.audioChunks} Opus frames from ${log.audioSources} source(s), ${log.onsets.length} clicks, ${log.frames.length} video frames; node: ${entry.session.audioPacketsSent} audio packets sent, ${JSON.stringify(srv.node.status(STREAM_ID)?.soundtrack ?? null)}`);
  t.ok(reports.video.length >= 3 && reports.audio.length >= 3, `sender reports on both tracks (${reports.video.length} video, ${reports.audio.length} audio)`);

  // The beats heard: each click's first sample, placed by the audio's reports.
  const heard = log.onsets.map((rtp) => captureMs(reports.audio, rtp, RATE));
  // The changes seen: the first frame of each flip, and the frame interval there.
  const frames = log.frames.map(([rtp, red]) => ({ at: captureMs(reports.video, rtp, 90_000), bright: red > (BRIGHT + DARK) / 2 }));
  const flips = frames.flatMap((f, i) => (i > 0 && f.bright !== (frames[i - 1] as { bright: boolean }).bright ? [{ at: f.at, interval: f.at - (frames[i - 1] as { at: number }).at }] : []));
  t.ok(flips.length >= BEATS, `a flip per beat (${flips.length})`);

  const lines: string[] = [];
  beats.forEach((due, i) => {
    const k = i + 1;
    const near = (xs: number[]) => xs.reduce((b, x) => (Math.abs(x - due) < Math.abs(b - due) ? x : b), Infinity);
    const h = near(heard);
    const flip = flips.reduce<{ at: number; interval: number } | null>((b, f) => (!b || Math.abs(f.at - due) < Math.abs(b.at - due) ? f : b), null);
    if (!Number.isFinite(h) || Math.abs(h - due) > BEAT_MS / 2) return t.fail(`beat ${k}: no click heard near it`);
    if (!flip || Math.abs(flip.at - due) > BEAT_MS / 2) return t.fail(`beat ${k}: no change seen near it`);
    const d = flip.at - h;
    t.ok(Math.abs(h - due) <= CLOCK_TOLERANCE_MS, `beat ${k}: heard where the tempo puts it (${(h - due).toFixed(1)} ms)`);
    lines.push(`${d.toFixed(1)}/${flip.interval.toFixed(0)}/${(h - due).toFixed(1)}`);
    t.ok(d >= -CLOCK_TOLERANCE_MS && d <= flip.interval + CLOCK_TOLERANCE_MS, `beat ${k}: seen ${d.toFixed(1)} ms after it is heard (frame interval ${flip.interval.toFixed(1)} ms; heard ${(h - due).toFixed(1)} ms from the grid)`);
  });
  t.comment(`change seen − beat heard / frame interval / beat heard − the tempo's beat, ms: ${lines.join(', ')}`);
});
