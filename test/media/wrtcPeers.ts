/**
 * @roamhq/wrtc peers for the media tests, each in a child process (wrtc segfaults at process
 * exit once a media track has been used, so it stays out of the tap process): a VP8 WHIP
 * publisher of a solid colour (fixtures/wrtcPublisher.ts) and a WHEP viewer that reports the
 * frames it decodes (fixtures/wrtcViewer.ts). Both are killed on teardown.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { STREAM_KEY } from './harness.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface WrtcPublisher {
  status: number;
  location: string | null;
  /** Stops sending frames but keeps the peer connection (and ICE consent) alive. */
  stopMedia(): void;
  /** SIGKILL: the publisher vanishes without DELETE. */
  kill(): void;
}

/** What the wrtc viewer reports about its latest decoded I420 frame. */
export interface WrtcFrameReport {
  /** Frames decoded so far. */
  frames: number;
  width: number;
  height: number;
  meanY: number;
  meanU: number;
  meanV: number;
  /** Share of luma samples below 24 or above 232. */
  extremeFraction: number;
  /** Audio frames decoded so far (only with an audio file), at audioRate Hz with audioChannels channels. */
  audioFrames: number;
  audioRate: number;
  audioChannels: number;
}

export interface WrtcViewer {
  status: number;
  location: string | null;
  /** Video codecs the viewer offered and the ones the answer kept. */
  offerCodecs: string[];
  answerCodecs: string[];
  /** Resolves with the first frame report (after this call) that satisfies `pred`; rejects after `timeoutMs`. */
  waitReport(pred: (r: WrtcFrameReport) => boolean, timeoutMs: number): Promise<WrtcFrameReport>;
  /** Closes the viewer's peer connection (it stops receiving and sending RTCP). */
  closePeer(): void;
}

const PUBLISHER = fileURLToPath(new URL('./fixtures/wrtcPublisher.ts', import.meta.url));
const SOUND_PUBLISHER = fileURLToPath(new URL('./fixtures/wrtcSoundPublisher.ts', import.meta.url));
const VIEWER = fileURLToPath(new URL('./fixtures/wrtcViewer.ts', import.meta.url));

/** Spawns a fixture, kills it on teardown, and yields its stdout lines. */
function start(t: Teardown, args: string[]): { child: ChildProcessByStdio<Writable, Readable, null>; lines: AsyncIterator<string> } {
  const child = spawn(process.execPath, ['--import', 'tsx', ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  return { child, lines: createInterface({ input: child.stdout })[Symbol.asyncIterator]() };
}

async function nextLine(lines: AsyncIterator<string>, what: string): Promise<string> {
  const { value, done } = await lines.next();
  if (done) throw new Error(`${what} exited before reporting`);
  return value;
}

/** Starts a wrtc VP8 publisher of a solid colour, with the harness's stream key or `token`. */
export async function wrtcPublish(t: Teardown, url: string, colour: [number, number, number], token = STREAM_KEY): Promise<WrtcPublisher> {
  const { child, lines } = start(t, [PUBLISHER, url, token, colour.join(',')]);
  const res = JSON.parse(await nextLine(lines, 'wrtc publisher')) as { status: number; location: string | null };
  return { ...res, stopMedia: () => child.stdin.write('stop\n'), kill: () => child.kill('SIGKILL') };
}

/** A wrtc publisher whose audio is a test signal (fixtures/wrtcSoundPublisher.ts). */
export interface WrtcSoundPublisher extends WrtcPublisher {
  /** ms epoch of the audio's first sample (the node's clock: one machine). */
  audioStart: number;
  /** ms epoch of each click's first sample sent so far. */
  clicks: number[];
}

/**
 * Starts a wrtc VP8 + Opus publisher whose audio is `clicks` (2 ms clicks every `periodMs` from
 * `startMs`) or a `ramp` (a 440 Hz tone from −50 to −5 dBFS over `rampMs` from `startMs`), with
 * the harness's stream key or `token`.
 */
export async function wrtcSoundPublish(
  t: Teardown,
  url: string,
  signal: { kind: 'clicks'; startMs: number; periodMs: number; count: number } | { kind: 'ramp'; startMs: number; rampMs: number },
  token = STREAM_KEY,
): Promise<WrtcSoundPublisher> {
  const args = signal.kind === 'clicks' ? [String(signal.startMs), String(signal.periodMs), String(signal.count)] : [String(signal.startMs), String(signal.rampMs)];
  const { child, lines } = start(t, [SOUND_PUBLISHER, url, token, signal.kind, ...args]);
  const res = JSON.parse(await nextLine(lines, 'wrtc sound publisher')) as { status: number; location: string | null };
  const out: WrtcSoundPublisher = { ...res, audioStart: 0, clicks: [], stopMedia: () => child.stdin.write('stop\n'), kill: () => child.kill('SIGKILL') };
  if (res.status !== 201) return out;
  out.audioStart = (JSON.parse(await nextLine(lines, 'wrtc sound publisher')) as { audioStart: number }).audioStart;
  void (async () => {
    for (;;) {
      const { value, done } = await lines.next();
      if (done) return;
      const msg = JSON.parse(value) as { click?: number };
      if (msg.click !== undefined) out.clicks.push(msg.click);
    }
  })();
  return out;
}

/** Starts a wrtc WHEP viewer (VP8 only: the build has no H.264). */
/** A wrtc WHEP viewer; with `audioFile`, the audio it decodes is appended there (raw int16, see the fixture). */
export async function wrtcView(t: Teardown, url: string, audioFile?: string): Promise<WrtcViewer> {
  const { child, lines } = start(t, [VIEWER, url, ...(audioFile ? [audioFile] : [])]);
  const res = JSON.parse(await nextLine(lines, 'wrtc viewer')) as Pick<WrtcViewer, 'status' | 'location' | 'offerCodecs' | 'answerCodecs'>;
  // Reports are read continuously and offered to whoever waits at that moment.
  const waiters = new Set<(r: WrtcFrameReport) => void>();
  void (async () => {
    for (;;) {
      const { value, done } = await lines.next();
      if (done) return;
      const report = JSON.parse(value) as WrtcFrameReport;
      for (const w of [...waiters]) w(report);
    }
  })();
  return {
    ...res,
    waitReport: (pred, timeoutMs) =>
      new Promise((resolve, reject) => {
        const done = () => {
          waiters.delete(check);
          clearTimeout(timer);
        };
        const check = (r: WrtcFrameReport) => {
          if (!pred(r)) return;
          done();
          resolve(r);
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`no matching wrtc frame report within ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(check);
      }),
    closePeer: () => child.stdin.write('close\n'),
  };
}
