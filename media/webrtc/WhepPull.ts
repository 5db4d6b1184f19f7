/**
 * An edge node's WHEP client of a stream's origin node (decision 0030): one recvonly session that
 * carries the origin's output (its one H.264 encode and its Opus) to the edge, which fans it out to
 * its own viewers without decoding or encoding anything.
 *
 * The receiving side is a WhipSession in pull mode (reorder window, our NACKs, PLI, liveness):
 * the link between two nodes is a network like a publisher's. The HTTP side is plain WHEP
 * (draft-ietf-wish-whep): POST the offer with every candidate (no trickle), apply the answer,
 * DELETE the session's Location when done.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { MediaError } from '../errors.ts';
import type { MediaSettings } from '../settings.ts';
import { TypedEmitter } from '../TypedEmitter.ts';
import type { DepacketizedFrame } from './H264Depacketizer.ts';
import type { TransportOptions } from './PeerTransport.ts';
import { WhipSession, type IngestStats, type SessionCloseReason } from './WhipSession.ts';

export interface WhepPullOptions {
  streamId: string;
  /** The origin's WHEP endpoint of the stream: `<origin URL>/live/<playback id>/whep`. */
  url: string;
  /** Headers that make the request an edge's pull (signed, see NodeSignatures.ts). */
  headers: Record<string, string>;
  transport: TransportOptions;
  settings: MediaSettings;
  logger: Logger;
  /** Whole H.264 access units (Annex B) as the origin sent them, starting at a key frame. */
  onVideoFrame: (frame: DepacketizedFrame) => void;
  /** The origin's Opus RTP, serialized. */
  onAudioRtp: (rtp: Buffer) => void;
}

export type WhepPullEvents = {
  connected: [];
  /** The pull ended: `deleted`/`closed` by us, `timeout`/`failed` when the origin went quiet or away. */
  close: [SessionCloseReason];
};

/** ms the DELETE of a session at the origin may take (the origin ends it anyway when its consent checks fail). */
const DELETE_TIMEOUT_MS = 2_000;

export class WhepPull extends TypedEmitter<WhepPullEvents> {
  readonly url: string;
  readonly #session: WhipSession;
  readonly #logger: Logger;
  readonly #headers: Record<string, string>;
  /** The session's URL at the origin (Location), for DELETE. */
  readonly location: string;

  /** Offers, asks the origin, applies its answer; rejects (and leaves nothing) when the origin refuses. */
  static async start(opts: WhepPullOptions): Promise<WhepPull> {
    const id = `pull-${randomBytes(8).toString('hex')}`;
    const { session, offer } = await WhipSession.pull({
      id,
      streamId: opts.streamId,
      transport: opts.transport,
      settings: opts.settings,
      logger: opts.logger,
      onVideoFrame: opts.onVideoFrame,
      onAudioRtp: opts.onAudioRtp,
    });
    try {
      const res = await fetch(opts.url, {
        method: 'POST',
        headers: { ...opts.headers, 'content-type': 'application/sdp' },
        body: offer,
        redirect: 'manual',
        signal: AbortSignal.timeout(opts.settings.connectTimeoutMs),
      });
      const body = await res.text();
      const location = res.headers.get('location');
      if (res.status !== 201 || !location) {
        const retryAfterS = Number(res.headers.get('retry-after') ?? '') || undefined;
        throw new MediaError(res.status === 404 ? 'INVALID_STATE' : 'OVERLOADED', `the origin refused the edge's pull: ${res.status} ${body.trim().slice(0, 200)}`, retryAfterS ? { retryAfterS } : undefined);
      }
      await session.accept(body);
      return new WhepPull(opts, session, new URL(location, opts.url).toString());
    } catch (err) {
      session.close('failed');
      if (err instanceof MediaError) throw err;
      throw new MediaError('OVERLOADED', `the origin did not answer the edge's pull: ${err instanceof Error ? err.message : String(err)}`, { cause: err, retryAfterS: 2 });
    }
  }

  private constructor(opts: WhepPullOptions, session: WhipSession, location: string) {
    super(opts.logger);
    this.url = opts.url;
    this.location = location;
    this.#session = session;
    this.#logger = opts.logger;
    this.#headers = opts.headers;
    session.on('connected', () => this.safeEmit('connected'));
    session.once('close', (reason) => this.safeEmit('close', reason));
  }

  get connected(): boolean {
    return this.#session.connected;
  }

  get closed(): boolean {
    return this.#session.closed;
  }

  /** Asks the origin for a key frame (PLI; at most every pliMinIntervalMs): a new viewer here starts on one. */
  requestKeyframe(): void {
    this.#session.requestKeyframe('decoder');
  }

  stats(): IngestStats {
    return this.#session.stats();
  }

  /** Ends the pull here and at the origin (DELETE, not waited for). */
  close(): void {
    if (this.#session.closed) return;
    this.#session.close('deleted');
    fetch(this.location, { method: 'DELETE', headers: this.#headers, signal: AbortSignal.timeout(DELETE_TIMEOUT_MS) })
      .then((res) => res.body?.cancel())
      .catch((err: unknown) => this.#logger.debug({ err }, `close() | DELETE at the origin failed [url:${this.location}]`));
  }
}
