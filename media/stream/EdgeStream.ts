/**
 * A stream relayed by an edge node (decision 0030): its publisher and pipeline live on another
 * media node (the origin); this node pulls the origin's output once over WHEP (WhepPull) and fans
 * it out to its own WHEP viewers through a hub like any stream's.
 *
 *   origin's WHEP output ─WhepPull (H.264 AUs, Opus RTP)─► StreamHub ─► WhepOutput (this node's viewers)
 *
 * Nothing is decoded or encoded here: the AUs are the origin's one encode, stamped on this node's
 * clock by their RTP time (RtpArrival: the least-delayed recent frame places the rest, so jitter
 * on the way does not reach the viewers' timestamps). A viewer that starts, or loses its
 * references, asks the origin for a key frame through the pull (PLI).
 *
 * It starts pulling with its first viewer, and stops `edgeLingerMs` after its last one left. When
 * the pull ends without us (the origin went away, its stream ended), the viewers here are closed:
 * they reconnect through the api, which places them again, as after a node crash.
 */
import type { Logger } from 'pino';
import { InvalidStateError } from '../errors.ts';
import { splitAnnexB } from '../H264Nal.ts';
import type { MediaSettings } from '../settings.ts';
import { TypedEmitter } from '../TypedEmitter.ts';
import type { DepacketizedFrame } from '../webrtc/H264Depacketizer.ts';
import type { TransportOptions } from '../webrtc/PeerTransport.ts';
import { RtpArrival } from '../webrtc/RtpArrival.ts';
import type { IngestStats, SessionCloseReason } from '../webrtc/WhipSession.ts';
import { WhepOutput } from '../webrtc/WhepOutput.ts';
import { WhepPull } from '../webrtc/WhepPull.ts';
import type { ReaderStatus } from '../StreamReader.ts';
import { rtpTime90k } from './OutputClock.ts';
import { StreamHub } from './StreamHub.ts';

export interface EdgeStreamOptions {
  streamId: string;
  /** The origin's WHEP endpoint of the stream and the signed headers of an edge's pull. */
  origin: { url: string; headers: Record<string, string> };
  settings: MediaSettings;
  transport: TransportOptions;
  logger: Logger;
}

/** Why an edge stream closed. */
export type EdgeCloseReason = 'idle' | 'origin-lost' | 'closed';

export type EdgeStreamEvents = {
  close: [EdgeCloseReason];
};

export interface EdgeStreamStatus {
  /** The origin's WHEP endpoint this edge pulls from. */
  origin: string;
  /** The pull's state: `connecting` until ICE and DTLS completed with the origin. */
  pull: 'connecting' | 'connected' | 'closed';
  /** The pull's receive counters (loss, NACKs, frames): the link between the nodes. */
  ingest: IngestStats | null;
  readers: Record<string, ReaderStatus>;
}

/** Video RTP clock, Hz. */
const VIDEO_RATE = 90_000;
/** How far back the least-delayed frame that places the origin's RTP time on our clock may be, ms. */
const ARRIVAL_WINDOW_MS = 2_000;

export class EdgeStream extends TypedEmitter<EdgeStreamEvents> {
  readonly streamId: string;
  readonly readers: StreamHub;
  readonly #opts: EdgeStreamOptions;
  readonly #logger: Logger;
  readonly #whep: WhepOutput;
  readonly #arrival = new RtpArrival(VIDEO_RATE, ARRIVAL_WINDOW_MS);
  /** Start of this edge's own 90 kHz output clock (node clock, ms). */
  readonly #rtpClockStart = performance.now();
  #pull: WhepPull | null = null;
  #starting: Promise<WhepPull> | null = null;
  #linger: NodeJS.Timeout | null = null;
  /** A viewer was here: only then does the last one leaving start the linger (the node closes an edge whose first viewer failed). */
  #everHeld = false;
  #closed = false;

  constructor(opts: EdgeStreamOptions) {
    super(opts.logger);
    this.streamId = opts.streamId;
    this.#opts = opts;
    this.#logger = opts.logger;
    this.readers = new StreamHub({
      streamId: opts.streamId,
      requestKeyUnit: () => this.#pull?.requestKeyframe(),
      requestSourceKeyframe: () => this.#pull?.requestKeyframe(),
      rtpTimestamp: (ptsMs) => rtpTime90k(ptsMs, this.#rtpClockStart),
      changed: () => this.#readersChanged(),
      logger: opts.logger,
    });
    this.readers.on('error', (message) => this.#logger.warn(`edge reader failed [streamId:${this.streamId}] ${message}`));
    this.#whep = this.readers.add((ctx) => new WhepOutput(ctx, { settings: opts.settings, transport: opts.transport, logger: opts.logger }));
  }

  /** The WHEP viewers here. */
  get whep(): WhepOutput {
    return this.#whep;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The origin's WHEP endpoint. */
  get origin(): string {
    return this.#opts.origin.url;
  }

  /**
   * Pulls from the origin if not yet (a viewer is about to be added). Rejects with the origin's
   * refusal (the stream is not there, the origin is full): the caller answers its viewer so.
   */
  async pull(): Promise<void> {
    if (this.#closed) throw new InvalidStateError(`edge stream closed [streamId:${this.streamId}]`);
    if (this.#pull && !this.#pull.closed) return;
    this.#starting ??= WhepPull.start({
      streamId: this.streamId,
      url: this.#opts.origin.url,
      headers: this.#opts.origin.headers,
      transport: this.#opts.transport,
      settings: this.#opts.settings,
      logger: this.#logger,
      onVideoFrame: (frame) => this.#video(frame),
      onAudioRtp: (rtp) => this.readers.opus(rtp, 0),
    }).finally(() => (this.#starting = null));
    const pull = await this.#starting;
    if (this.#closed) {
      pull.close();
      throw new InvalidStateError(`edge stream closed [streamId:${this.streamId}]`);
    }
    if (this.#pull === pull) return;
    this.#pull = pull;
    this.#logger.info(`pull() | pulling from the origin [streamId:${this.streamId}] [origin:${pull.url}]`);
    pull.on('connected', () => this.#whep.connectedViewerCount > 0 && pull.requestKeyframe());
    pull.once('close', (reason: SessionCloseReason) => {
      if (this.#closed || reason === 'deleted') return;
      this.#logger.warn(`pull() | the origin's stream went away [streamId:${this.streamId}] [reason:${reason}]`);
      this.close('origin-lost');
    });
  }

  #video(frame: DepacketizedFrame): void {
    const now = performance.now();
    const rtpMs = this.#arrival.arrive(frame.timestamp, now);
    const ptsMs = rtpMs + (this.#arrival.least ?? now - rtpMs);
    this.readers.video({ nals: splitAnnexB(frame.data), keyframe: frame.keyframe, atMs: now, encodeMs: -1, pts: -1, ptsMs }, false);
  }

  /** Viewers came or went: the last one gone starts the linger; a new one cancels it. */
  #readersChanged(): void {
    if (this.#closed) return;
    if (this.readers.holds) {
      this.#everHeld = true;
      if (this.#linger) clearTimeout(this.#linger);
      this.#linger = null;
      return;
    }
    if (this.#linger || !this.#everHeld) return;
    this.#linger = setTimeout(() => {
      this.#linger = null;
      if (!this.readers.holds) this.close('idle');
    }, this.#opts.settings.edgeLingerMs);
  }

  status(): EdgeStreamStatus {
    const pull = this.#pull;
    return {
      origin: this.#opts.origin.url,
      pull: !pull || pull.closed ? (this.#starting ? 'connecting' : 'closed') : pull.connected ? 'connected' : 'connecting',
      ingest: pull ? pull.stats() : null,
      readers: this.readers.status(),
    };
  }

  /** Stops pulling and closes the viewers here. */
  close(reason: EdgeCloseReason = 'closed'): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#linger) clearTimeout(this.#linger);
    this.#pull?.close();
    void this.#starting?.then((p) => p.close()).catch(() => undefined);
    void this.readers.close();
    this.#logger.info(`close() | edge stream closed [streamId:${this.streamId}] [reason:${reason}]`);
    this.safeEmit('close', reason);
  }
}
