/**
 * Pushes the stream's encoder output (H.264) and AAC audio to `output_rtmp_url`, restarting with
 * backoff when the far end drops.
 *
 *   EncoderBin AUs + AacEncoderBin frames ─(FlvMuxer, in Node)─► stdin ─► ffmpeg -f flv -i pipe:0 -c copy -f flv rtmp://…
 *
 * Why a child process and not `flvmux ! rtmp2sink` in-process: when this was built the GStreamer
 * binding could not read a pipeline's bus (decision 0004; our addon forwards bus errors now, see
 * decision 0006), so an in-process rtmp2sink's
 * connection errors would be invisible, and a stuck TLS/TCP connect would sit inside the media
 * process. A child is isolated by construction (it cannot stall or crash WHEP/HLS), its exit is the
 * failure signal and its stderr the error text. No transcoding happens in it (`-c copy`).
 *
 * ffmpeg never dials the target itself: it pushes to an RtmpRelay on loopback, which checks the
 * target's addresses against the outbound policy on every connection and dials the checked one.
 * Nothing this class logs or reports carries the stream key (ffmpeg's stderr is redacted too).
 *
 * Each (re)connection starts a fresh FLV at timestamp 0 on the next keyframe (we ask the encoder
 * for one). Frames are dropped, never queued, while disconnected or when the pipe backs up beyond
 * `maxQueuedBytes` (slow far end): the push then resumes on the next keyframe.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { Logger } from 'pino';
import { AAC_ASC, AAC_SILENT_FRAME } from '../gst/AacEncoderBin.ts';
import { aacFrame, aacSequenceHeader, avcFrame, avcSequenceHeader, flvHeader } from './FlvMuxer.ts';
import { NAL_AUD, NAL_PPS, NAL_SPS, nalType } from '../H264Nal.ts';
import { parseRtmpTarget, redactRtmpText, redactRtmpUrl, RtmpRelay, type OutboundPolicy, type RtmpTarget } from './RtmpRelay.ts';
import { TypedEmitter } from '../TypedEmitter.ts';

/**
 * - `connecting`: ffmpeg started; no media confirmed written to the server yet.
 * - `live`: ffmpeg reports bytes written to the RTMP server.
 * - `reconnecting`: the last attempt failed or the server dropped us; a retry is scheduled.
 * - `closed`: stopped (stream ended or the output was removed).
 */
export type RtmpPushState = 'connecting' | 'live' | 'reconnecting' | 'closed';

export interface RtmpPushStatus {
  state: RtmpPushState;
  /** The target with everything after its application (the stream key, query, userinfo) replaced by `…` (redactRtmpUrl). */
  url: string;
  /** Attempts started after the first (each one a reconnect). */
  reconnects: number;
  /** ms epoch the current connection went live. */
  liveSince: number | undefined;
  /** ffmpeg's last error line(s) of the latest failed attempt. */
  lastError: string | undefined;
  lastErrorAt: number | undefined;
  /** FLV bytes handed to ffmpeg over this push's lifetime. */
  bytesOut: number;
  framesDropped: number;
}

export interface RtmpPushOptions {
  url: string;
  /** Address rules every connection must pass (see RtmpRelay). */
  policy?: OutboundPolicy;
  logger: Logger;
  /** Asks the encoder for an IDR (a connection starts on one). */
  requestKeyUnit: () => void;
  ffmpegPath?: string;
  /** Backoff between attempts, ms: doubles from min to max; reset after 10 s live. */
  backoffMinMs?: number;
  backoffMaxMs?: number;
  /** Unwritten FLV bytes in the pipe before frames are dropped. Default 4 MB. */
  maxQueuedBytes?: number;
}

export type RtmpPushEvents = { state: [RtmpPushState]; close: [] };

const AAC_FRAME_MS = (1024 / 48_000) * 1000;

export { redactRtmpUrl };

export class RtmpPush extends TypedEmitter<RtmpPushEvents> {
  readonly #opts: RtmpPushOptions;
  readonly #logger: Logger;
  #state: RtmpPushState = 'connecting';
  #child: ChildProcessByStdio<Writable, Readable, Readable> | null = null;
  #retryTimer: NodeJS.Timeout | undefined;
  #backoffMs: number;
  #attempts = 0;
  #liveSince: number | undefined;
  #lastError: string | undefined;
  #lastErrorAt: number | undefined;
  #stderrTail: string[] = [];
  #bytesOut = 0;
  #framesDropped = 0;
  /** The current connection got its headers and first keyframe. */
  #started = false;
  #epochMs = 0;
  #audioNextMs = 0;
  #lastAudioAtMs = -Infinity;
  #sps: Uint8Array | undefined;
  #pps: Uint8Array | undefined;
  readonly #target: RtmpTarget;
  readonly #relay: RtmpRelay;
  /** The loopback URL ffmpeg pushes to (the relay's), once it listens. */
  #relayUrl: Promise<string>;

  constructor(opts: RtmpPushOptions) {
    const logger = opts.logger.child({ module: 'RtmpPush' });
    super(logger);
    this.#opts = opts;
    this.#logger = logger;
    this.#backoffMs = opts.backoffMinMs ?? 1000;
    this.#target = parseRtmpTarget(opts.url);
    this.#relay = new RtmpRelay({ target: this.#target, ...(opts.policy ? { policy: opts.policy } : {}) });
    this.#relayUrl = this.#relay.listen();
    this.#relayUrl.catch(() => undefined); // #spawn reports it
    this.#spawn();
  }

  get state(): RtmpPushState {
    return this.#state;
  }

  #setState(state: RtmpPushState): void {
    if (state === this.#state) return;
    this.#state = state;
    this.#logger.info(`state() | ${state} [url:${redactRtmpUrl(this.#opts.url)}]`);
    this.safeEmit('state', state);
  }

  #spawn(): void {
    this.#attempts++;
    this.#started = false;
    this.#stderrTail = [];
    this.#relayUrl.then(
      (relayUrl) => {
        if (this.#state !== 'closed') this.#spawnFfmpeg(relayUrl);
      },
      (err: unknown) => {
        this.#lastError = `relay could not listen: ${String(err)}`;
        this.#lastErrorAt = Date.now();
        this.#logger.error(`spawn() | ${this.#lastError}`);
      },
    );
  }

  #spawnFfmpeg(relayUrl: string): void {
    const args = [
      '-hide_banner',
      '-loglevel',
      'error',
      '-nostats',
      '-progress',
      'pipe:1',
      '-stats_period',
      '0.5',
      '-probesize',
      '65536',
      '-analyzeduration',
      '500000',
      '-f',
      'flv',
      '-i',
      'pipe:0',
      '-c',
      'copy',
      '-f',
      'flv',
      '-flvflags',
      'no_duration_filesize',
      // The RTMP connect names the real server, not the relay; application and stream name are
      // given, not read from the URL (parseRtmpTarget: a trailing `/` would move the key into the app).
      '-rtmp_tcurl',
      this.#target.tcUrl,
      '-rtmp_app',
      this.#target.app,
      '-rtmp_playpath',
      this.#target.playpath,
      relayUrl,
    ];
    const child = spawn(this.#opts.ffmpegPath ?? 'ffmpeg', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    this.#child = child;
    child.stdin.on('error', () => undefined); // EPIPE when ffmpeg exits; the exit handler reports it
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      // -progress: key=value lines every 0.5 s; total_size > 0 means FLV reached the server.
      const m = /total_size=(\d+)/.exec(chunk);
      if (m && Number(m[1]) > 0 && this.#child === child && this.#state === 'connecting') {
        this.#liveSince = Date.now();
        this.#setState('live');
      }
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      for (const line of chunk.split('\n')) {
        if (line.trim()) this.#stderrTail = [...this.#stderrTail.slice(-4), redactRtmpText(line.trim(), this.#target)];
      }
    });
    child.once('error', (err) => this.#onExit(child, null, err.message));
    child.once('close', (code, signal) => this.#onExit(child, code, signal ? `killed by ${signal}` : undefined));
    this.#opts.requestKeyUnit();
  }

  #onExit(child: ChildProcessByStdio<Writable, Readable, Readable>, code: number | null, why: string | undefined): void {
    if (child !== this.#child) return;
    this.#child = null;
    if (this.#state === 'closed') return;
    const tail = this.#stderrTail.join(' | ');
    // The relay knows why the far end was not reached (refused by policy, unreachable, TLS);
    // ffmpeg only saw its loopback connection close.
    this.#lastError = this.#relay.lastError ?? (tail || why || `ffmpeg exited with code ${code}`);
    this.#relay.lastError = undefined;
    this.#lastErrorAt = Date.now();
    const wasLiveLong = this.#liveSince !== undefined && Date.now() - this.#liveSince > 10_000;
    if (wasLiveLong) this.#backoffMs = this.#opts.backoffMinMs ?? 1000;
    this.#liveSince = undefined;
    this.#logger.warn(`exit() | push failed, retrying in ${this.#backoffMs} ms [code:${code}] [error:${this.#lastError}]`);
    this.#setState('reconnecting');
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (this.#state === 'closed') return;
      this.#setState('connecting');
      this.#spawn();
    }, this.#backoffMs);
    this.#backoffMs = Math.min(this.#backoffMs * 2, this.#opts.backoffMaxMs ?? 30_000);
  }

  #write(buf: Buffer): boolean {
    const child = this.#child;
    if (!child || child.stdin.destroyed) return false;
    if (child.stdin.writableLength > (this.#opts.maxQueuedBytes ?? 4_000_000)) {
      this.#started = false; // resume on a keyframe once the pipe drains
      return false;
    }
    child.stdin.write(buf);
    this.#bytesOut += buf.length;
    return true;
  }

  /**
   * One encoder access unit (Annex B NALs as EncoderBin emits them; AUD/SPS/PPS handled here) at
   * `ptsMs` on the stream's output timeline (the node's monotonic clock, as audio's arrival times).
   */
  pushVideo(au: { nals: Uint8Array[]; keyframe: boolean; ptsMs: number }): void {
    if (this.#state === 'closed' || !this.#child) return;
    const nals: Uint8Array[] = [];
    for (const nal of au.nals) {
      const type = nalType(nal);
      if (type === NAL_SPS) this.#sps = nal;
      else if (type === NAL_PPS) this.#pps = nal;
      else if (type !== NAL_AUD) nals.push(nal);
    }
    if (!this.#started) {
      if (!au.keyframe || !this.#sps || !this.#pps) {
        this.#framesDropped++;
        return;
      }
      this.#epochMs = au.ptsMs;
      this.#audioNextMs = 0;
      const ok = this.#write(Buffer.concat([flvHeader(), avcSequenceHeader(this.#sps, this.#pps), aacSequenceHeader(AAC_ASC)]));
      if (!ok) return;
      this.#started = true;
    } else if (au.keyframe && this.#sps && this.#pps) {
      // Parameter sets may change (encoder rebuilt at a new size): resend the sequence header.
      this.#write(avcSequenceHeader(this.#sps, this.#pps));
    }
    const ts = au.ptsMs - this.#epochMs;
    // No publisher audio for 500 ms: keep the AAC track going with silence (players and recorders
    // that wait for both tracks would otherwise stall).
    if (performance.now() - this.#lastAudioAtMs > 500) {
      while (this.#audioNextMs <= ts) {
        this.#write(aacFrame(AAC_SILENT_FRAME, this.#audioNextMs));
        this.#audioNextMs += AAC_FRAME_MS;
      }
    }
    if (!this.#write(avcFrame(nals, au.keyframe, ts))) this.#framesDropped++;
  }

  /** One raw AAC frame (1024 samples, 48 kHz) that reached Node at atMs. */
  pushAudio(frame: Uint8Array, atMs: number): void {
    if (this.#state === 'closed' || !this.#started) return;
    this.#lastAudioAtMs = atMs;
    const arrival = atMs - this.#epochMs;
    // Timestamps advance by exactly one frame; re-anchor when arrival drifts beyond 150 ms.
    if (Math.abs(arrival - this.#audioNextMs) > 150) this.#audioNextMs = Math.max(0, arrival);
    this.#write(aacFrame(frame, this.#audioNextMs));
    this.#audioNextMs += AAC_FRAME_MS;
  }

  status(): RtmpPushStatus {
    return {
      state: this.#state,
      url: redactRtmpUrl(this.#opts.url),
      reconnects: Math.max(0, this.#attempts - 1),
      liveSince: this.#liveSince,
      lastError: this.#lastError,
      lastErrorAt: this.#lastErrorAt,
      bytesOut: this.#bytesOut,
      framesDropped: this.#framesDropped,
    };
  }

  /** Stops the push; ffmpeg gets EOF (clean FLV end) and SIGKILL if it lingers. */
  close(): void {
    if (this.#state === 'closed') return;
    this.#setState('closed');
    clearTimeout(this.#retryTimer);
    const child = this.#child;
    this.#child = null;
    if (child) {
      child.stdin.end();
      const kill = setTimeout(() => child.kill('SIGKILL'), 2000);
      child.once('close', () => {
        clearTimeout(kill);
        this.#relay.close(); // after ffmpeg: the FLV's end still reaches the server
      });
    } else {
      this.#relay.close();
    }
    this.safeEmit('close');
  }
}
