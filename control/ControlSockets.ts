/**
 * Every control socket of this api process: admits a new one only under the per-stream and
 * per-account caps (429 STREAMS/TOO_MANY_SOCKETS otherwise), creates its session, shares one
 * ControlFeed per stream among its sockets and pings them all from one timer. What one socket can
 * cost is bounded (its inbound budget, its message size), and how many there are is bounded here,
 * so no account can take the event loop from the others. Counts are per api process.
 */
import type { Logger } from 'pino';
import type { Account } from '../store/index.ts';
import { streamError } from '../errors/index.ts';
import type { StreamControl, StreamService } from '../streams/index.ts';
import type { Config } from './config.ts';
import { ControlFeed } from './ControlFeed.ts';
import { ControlSession, type SocketCredential } from './ControlSession.ts';
import type { WebSocketLike } from './WebSockets.ts';

/** Keepalive ping period, ms; a socket that misses two pongs is dropped (dead network path). */
export const PING_MS = 15_000;

export interface ControlSocketsOptions {
  limits: Config['control'];
  streams: StreamService;
  control: StreamControl;
  logger: Logger;
  now?: () => number;
}

export interface OpenOptions {
  account: Account;
  streamId: string;
  traceId: string;
  credential: SocketCredential;
  verifyToken: (token: string) => number | null;
}

export class ControlSockets {
  readonly #o: ControlSocketsOptions;
  readonly #log: Logger;
  readonly #sessions = new Set<ControlSession>();
  readonly #perAccount = new Map<string, number>();
  readonly #feeds = new Map<string, ControlFeed>();
  readonly #pinger: NodeJS.Timeout;
  #closed = false;

  constructor(opts: ControlSocketsOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'ControlSockets' });
    this.#pinger = setInterval(() => {
      for (const s of this.#sessions) s.keepalive();
    }, PING_MS);
    this.#pinger.unref();
  }

  /** Open sockets, all streams. */
  get size(): number {
    return this.#sessions.size;
  }

  /**
   * Throws 429 STREAMS/TOO_MANY_SOCKETS when the stream already has its most sockets. Checked
   * before authentication, so a flood of upgrades at a full stream costs no store reads: the
   * answer says no more than that the stream is full, to a caller that knows its id.
   */
  admitStream(streamId: string, accountId: string | null = null): void {
    const limit = this.#o.limits.socketsPerStream;
    if ((this.#feeds.get(streamId)?.size ?? 0) >= limit) throw this.#refusal('stream', limit, streamId, accountId);
  }

  #refusal(scope: 'stream' | 'account', limit: number, streamId: string, accountId: string | null) {
    this.#log.debug(`admit() | refused: ${scope} at its cap [streamId:${streamId}] [accountId:${accountId ?? '?'}] [limit:${limit}]`);
    const setting = scope === 'stream' ? 'CONTROL_SOCKETS_PER_STREAM' : 'CONTROL_SOCKETS_PER_ACCOUNT';
    return streamError('STREAMS/TOO_MANY_SOCKETS', `At most ${limit} control sockets may be open ${scope === 'stream' ? 'on one stream' : 'per account'}; close one first.`, {
      details: { scope, limit, setting },
    });
  }

  /**
   * Throws 429 STREAMS/TOO_MANY_SOCKETS when the stream or the account is at its cap. Call right
   * before the upgrade, in the same tick as `open` (ws upgrades synchronously), so no other
   * upgrade slips in between.
   */
  admit(account: Account, streamId: string): void {
    this.admitStream(streamId, account.id);
    const limit = this.#o.limits.socketsPerAccount;
    if ((this.#perAccount.get(account.id) ?? 0) >= limit) throw this.#refusal('account', limit, streamId, account.id);
  }

  /** The session of an upgraded socket; it leaves every count when it closes. */
  open(socket: WebSocketLike, o: OpenOptions): ControlSession {
    const { streams, control, logger, now, limits } = this.#o;
    const session = new ControlSession({
      socket,
      account: o.account,
      streamId: o.streamId,
      streams,
      control,
      logger,
      traceId: o.traceId,
      credential: o.credential,
      verifyToken: o.verifyToken,
      inbound: { bytesPerS: limits.inboundBytesPerS, messagesPerS: limits.inboundMessagesPerS, maxMessageBytes: limits.maxMessageBytes },
      ...(now ? { now } : {}),
    });
    let feed = this.#feeds.get(o.streamId);
    if (!feed) {
      feed = new ControlFeed({ streamId: o.streamId, account: o.account, streams, control, logger, ...(now ? { now } : {}) });
      this.#feeds.set(o.streamId, feed);
    }
    this.#sessions.add(session);
    this.#perAccount.set(o.account.id, (this.#perAccount.get(o.account.id) ?? 0) + 1);
    const f = feed;
    session.onClose(() => {
      this.#sessions.delete(session);
      const left = (this.#perAccount.get(o.account.id) ?? 1) - 1;
      if (left > 0) this.#perAccount.set(o.account.id, left);
      else this.#perAccount.delete(o.account.id);
      f.delete(session);
      if (f.size === 0) {
        f.close();
        if (this.#feeds.get(o.streamId) === f) this.#feeds.delete(o.streamId);
      }
    });
    // Added last: the feed may push the last status at once, after hello.
    feed.add(session);
    return session;
  }

  /** Idempotent: ends every socket (`terminate`: at once, for shutdown) and stops the timers. */
  close(terminate = true): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#pinger);
    for (const s of [...this.#sessions]) s.close(terminate);
    for (const f of this.#feeds.values()) f.close();
    this.#feeds.clear();
  }
}
