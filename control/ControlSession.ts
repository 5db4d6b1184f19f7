/**
 * One client's control WebSocket on one stream: reads its messages (updates, tempo, cancel,
 * ping, token), answers each, and relays what its stream's ControlFeed pushes (status on change,
 * stats once a second), so clients never poll. Created by ControlSockets once the upgrade is
 * authenticated and admitted. What the client sends is metered (InboundThrottle: the socket is
 * not read while over budget), and a socket opened with a control token ends when the token does.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Account } from '../store/index.ts';
import { ClientMessageSchema, type ClientMessage } from './ControlMessages.ts';
import { fieldPath, toApiError } from './ErrorReplies.ts';
import { InboundThrottle, type InboundLimits } from './InboundThrottle.ts';
import { streamError, type ApiError } from '../errors/index.ts';
import type { ControlEvent, StreamControl, StreamService, Tempo } from '../streams/index.ts';
import type { FeedSubscriber } from './ControlFeed.ts';
import { WS_OPEN, type WebSocketLike } from './WebSockets.ts';

export const SESSION_TIMING = {
  /** Bytes queued to a slow client above which stats pushes are skipped (acks and errors never are). */
  maxBufferedBytes: 1 << 20,
  /** Messages read and waiting for their turn above which the socket is not read (backpressure). */
  maxPendingMessages: 32,
} as const;

/**
 * Close codes of the control socket (docs/control.md, "Close codes"). RFC 6455 §7.4.2: 4000–4999
 * are the application's; 1009 (message too big) is sent by the WebSocket layer itself.
 */
export const CLOSE_CODES = {
  /** The server is shutting down (or the session ended on its side). */
  goingAway: 1001,
  /** A message larger than CONTROL_MAX_MESSAGE_BYTES. */
  tooBig: 1009,
  /** The control token that opened the socket expired (renew it with a `token` message before). */
  tokenExpired: 4401,
  /** The stream was deleted. */
  streamNotFound: 4404,
} as const;

/** How a socket was opened: with the API key (no end), or a control token that ends at `expiresAt`. */
export type SocketCredential = { kind: 'key' } | { kind: 'token'; expiresAt: number };

export interface ControlSessionOptions {
  socket: WebSocketLike;
  account: Account;
  streamId: string;
  streams: StreamService;
  control: StreamControl;
  logger: Logger;
  /** W3C trace id of the upgrade request, carried by every error envelope. */
  traceId: string;
  credential: SocketCredential;
  /** A fresh control token's expiry (ms) when it is valid for this account and stream; else null. */
  verifyToken: (token: string) => number | null;
  inbound: InboundLimits;
  now?: () => number;
}

const tempoView = (t: Tempo) => ({ bpm: t.bpm, phase: t.phase, beats_per_bar: t.beatsPerBar, song_id: t.songId });

/** setTimeout's longest delay (2^31 − 1 ms); a later expiry is re-armed when this fires. */
const MAX_TIMER_MS = 2_147_483_647;

export class ControlSession implements FeedSubscriber {
  readonly id = `ctl_${randomBytes(9).toString('base64url')}`;
  readonly #o: ControlSessionOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #unsubscribe: () => void;
  readonly #throttle: InboundThrottle;
  /** ms since the epoch at which the socket's credential ends; null: never (API key). */
  #expiresAt: number | null;
  #expiryTimer: NodeJS.Timeout | null = null;
  #resumeTimer: NodeJS.Timeout | null = null;
  /** The wait of the message whose turn has not come (cleared on close: the queue stops there). */
  #waitTimer: NodeJS.Timeout | null = null;
  #paused = false;
  #pending = 0;
  #missedPongs = 0;
  #closed = false;
  /** Messages handled one at a time, in order (an update never overtakes the one sent before it). */
  #queue: Promise<void> = Promise.resolve();
  readonly #closeListeners: (() => void)[] = [];

  constructor(opts: ControlSessionOptions) {
    this.#o = opts;
    this.#now = opts.now ?? Date.now;
    this.#log = opts.logger.child({ module: 'ControlSession', streamId: opts.streamId });
    this.#throttle = new InboundThrottle(opts.inbound);
    this.#expiresAt = opts.credential.kind === 'token' ? opts.credential.expiresAt : null;
    const ws = opts.socket;
    this.#unsubscribe = opts.control.on(opts.streamId, (e) => this.#onControl(e));
    ws.on('message', (data, isBinary) => this.#onFrame(data, isBinary));
    ws.on('close', () => this.close());
    ws.on('error', (err) => {
      this.#log.debug({ err }, 'socket error');
      // A protocol error (a message over the size cap…): ws has sent the close frame and would go
      // on reading, and dropping, whatever the peer still sends for up to 30 s. The session ends
      // now (its place is free), the socket is not read (after ws's own resume on the next tick)
      // and is dropped after a second, time enough for the close frame to arrive.
      this.close();
      setImmediate(() => ws.pause());
      setTimeout(() => ws.terminate(), 1000).unref();
    });
    ws.on('pong', () => {
      this.#missedPongs = 0;
    });
    const tempo = opts.control.tempo(opts.streamId);
    this.#send({
      type: 'hello',
      session_id: this.id,
      stream_id: opts.streamId,
      server_time: this.#now(),
      expires_at: this.#expiresAt,
      tempo: tempo ? tempoView(tempo) : null,
      scheduled: opts.control.scheduled(opts.streamId),
    });
    this.#armExpiry();
  }

  /** Runs once when the session closes (its owner forgets it). */
  onClose(fn: () => void): void {
    if (this.#closed) fn();
    else this.#closeListeners.push(fn);
  }

  #sendRaw(text: string): void {
    if (this.#closed || this.#o.socket.readyState !== WS_OPEN) return;
    this.#o.socket.send(text);
  }

  #send(msg: unknown): void {
    this.#sendRaw(JSON.stringify(msg));
  }

  #sendError(id: string | null, err: ApiError): void {
    this.#send({
      type: 'error',
      id,
      error: { success: false, error: err.message, code: err.code, status: err.status, details: err.details ?? null, requestId: id ?? this.id, traceId: this.#o.traceId },
    });
  }

  push(message: string): void {
    this.#sendRaw(message);
  }

  pushStats(message: string): void {
    if (this.#o.socket.bufferedAmount < SESSION_TIMING.maxBufferedBytes) this.#sendRaw(message);
  }

  fail(err: ApiError): void {
    this.#sendError(null, err);
    if (err.status === 404) this.#end(CLOSE_CODES.streamNotFound, 'stream not found');
  }

  /** Keepalive, called every ping period by ControlSockets: a socket that misses two pongs is dropped. */
  keepalive(): void {
    if (this.#closed) return;
    if (++this.#missedPongs > 2) {
      this.#log.info('keepalive() | no pong: dropping the socket');
      this.#o.socket.terminate();
      return;
    }
    if (this.#o.socket.readyState === WS_OPEN) this.#o.socket.ping();
  }

  // ───────────────────────────── credential expiry

  #armExpiry(): void {
    if (this.#expiryTimer) clearTimeout(this.#expiryTimer);
    this.#expiryTimer = null;
    if (this.#expiresAt === null || this.#closed) return;
    const ms = this.#expiresAt - this.#now();
    if (ms <= 0) return this.#expire();
    this.#expiryTimer = setTimeout(() => (this.#expiresAt !== null && this.#expiresAt <= this.#now() ? this.#expire() : this.#armExpiry()), Math.min(ms, MAX_TIMER_MS));
  }

  #expired(): boolean {
    return this.#expiresAt !== null && this.#expiresAt <= this.#now();
  }

  #expire(): void {
    if (this.#closed) return;
    this.#log.info('expire() | control token expired: closing the socket');
    this.#sendError(null, streamError('AUTH/UNAUTHORIZED', 'The control token that opened this socket has expired; open the socket again with a fresh token (or send a `token` message before it expires).', { details: { expired_at: this.#expiresAt } }));
    this.#end(CLOSE_CODES.tokenExpired, 'control token expired');
  }

  // ───────────────────────────── inbound metering

  /**
   * Every frame is counted before it is parsed. Over budget, the socket is not read until the
   * budget refills, and the frames already read (a TCP read holds many small ones) wait their turn:
   * each is handled when the budget would have covered it, so the rate holds exactly.
   */
  #onFrame(data: Buffer, isBinary: boolean): void {
    if (this.#closed) return;
    this.#pending++;
    const waitMs = this.#throttle.take(data.length);
    if (waitMs > 0 || this.#pending >= SESSION_TIMING.maxPendingMessages) this.#pause(waitMs);
    const dueAt = performance.now() + waitMs;
    this.#queue = this.#queue
      .then(async () => {
        const ms = dueAt - performance.now();
        if (ms > 0 && !this.#closed) await new Promise<void>((resolve) => (this.#waitTimer = setTimeout(resolve, ms)));
        await this.#onMessage(data, isBinary);
      })
      .finally(() => {
        this.#pending--;
        this.#maybeResume();
      });
  }

  #pause(waitMs: number): void {
    if (!this.#paused) {
      this.#paused = true;
      this.#o.socket.pause();
    }
    if (waitMs > 0 && !this.#resumeTimer) {
      this.#resumeTimer = setTimeout(() => {
        this.#resumeTimer = null;
        this.#maybeResume();
      }, waitMs);
    }
  }

  #maybeResume(): void {
    if (!this.#paused || this.#closed || this.#pending >= SESSION_TIMING.maxPendingMessages / 2) return;
    const waitMs = this.#throttle.waitMs();
    if (waitMs > 0) return this.#pause(waitMs);
    this.#paused = false;
    this.#o.socket.resume();
  }

  #onControl(e: ControlEvent): void {
    switch (e.type) {
      case 'applied':
        this.#send({ type: 'ack', ...e.ack });
        break;
      case 'failed':
        this.#sendError(e.id, e.error);
        break;
      case 'scheduled':
        this.#send({ type: 'scheduled', scheduled: e.scheduled });
        break;
      case 'transition_done':
        this.#send({ type: 'transition_done', id: e.id, at: e.at, frame: e.frame, rtp_timestamp: e.rtp_timestamp });
        break;
      case 'tempo':
        this.#send({ type: 'tempo', ...tempoView(e.tempo) });
        break;
    }
  }

  async #onMessage(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.#closed) return;
    let id: string | null = null;
    try {
      let raw: unknown;
      try {
        raw = isBinary ? undefined : JSON.parse(data.toString('utf8'));
      } catch {
        raw = undefined;
      }
      const maybeId = (raw as { id?: unknown } | undefined)?.id;
      if (typeof maybeId === 'string' && maybeId.length <= 64) id = maybeId;
      if (this.#expired()) {
        // The timer closes the socket at the expiry; a message read in between is refused too.
        this.#sendError(id, streamError('AUTH/UNAUTHORIZED', 'The control token that opened this socket has expired; open the socket again with a fresh token.', { details: { expired_at: this.#expiresAt } }));
        this.#end(CLOSE_CODES.tokenExpired, 'control token expired');
        return;
      }
      const type = (raw as { type?: unknown } | undefined)?.type;
      const isFree = type === 'ping' || type === 'token';
      // Every message but ping and token counts against PATCH's budget, invalid ones included (as PATCH counts them).
      if (!isFree) await this.#o.streams.checkUpdateRate(this.#o.account, this.#o.streamId, 'patch');
      if (raw === undefined) throw streamError('REQUEST/MALFORMED_JSON', 'A message must be one JSON object in a text frame.');
      const parsed = ClientMessageSchema.safeParse(raw);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        const field = issue ? fieldPath(issue.path) : '(message)';
        throw streamError('REQUEST/INVALID', `${field}: ${issue?.message ?? 'invalid'}`, {
          details: { where: 'message', issues: parsed.error.issues.map((i) => ({ field: fieldPath(i.path), message: i.message })) },
        });
      }
      await this.#handle(parsed.data);
    } catch (err) {
      const apiErr = toApiError('streams', err);
      if (apiErr.status >= 500) this.#log.error({ err }, 'onMessage() | failed');
      this.#sendError(id, apiErr);
    }
  }

  async #handle(msg: ClientMessage): Promise<void> {
    const { account, streamId, control } = this.#o;
    switch (msg.type) {
      case 'ping':
        this.#send({ type: 'pong', id: msg.id ?? null, client_time: msg.client_time ?? null, server_time: this.#now() });
        return;
      case 'token': {
        const expiresAt = this.#o.verifyToken(msg.token);
        if (expiresAt === null) {
          throw streamError('AUTH/UNAUTHORIZED', 'token: not a valid, unexpired control token for this stream.', { details: { where: 'message', issues: [{ field: 'token', message: 'invalid or expired' }] } });
        }
        // A socket opened with the API key has no end to move.
        if (this.#expiresAt !== null) {
          this.#expiresAt = Math.max(this.#expiresAt, expiresAt);
          this.#armExpiry();
        }
        this.#send({ type: 'token', id: msg.id ?? null, expires_at: this.#expiresAt });
        return;
      }
      case 'tempo': {
        const { type: _t, ...input } = msg;
        await control.setTempo(account, streamId, input, '(message)');
        return; // the `tempo` event answers every socket of the stream, this one included
      }
      case 'cancel':
        if (!(await control.cancel(account, streamId, msg.id))) throw streamError('REQUEST/INVALID', `id: no scheduled update ${msg.id}`, { details: { where: 'message', issues: [{ field: 'id', message: 'not scheduled' }] } });
        return;
      case 'update': {
        const id = msg.id ?? `upd_${randomBytes(6).toString('base64url')}`;
        const r = await control.submit(account, streamId, {
          id,
          params: msg.params,
          at: msg.at,
          onBeat: msg.on_beat === undefined ? undefined : msg.on_beat === true ? { every: 1 } : msg.on_beat,
          tempo: msg.tempo,
          transition: msg.transition,
        });
        if ('ack' in r) this.#send({ type: 'ack', ...r.ack });
        else this.#send({ type: 'queued', ...r.scheduled });
        return;
      }
    }
  }

  /** Closes the socket with `code` (the client sees why) and ends the session. */
  #end(code: number, reason: string): void {
    if (this.#closed) return;
    if (this.#o.socket.readyState === WS_OPEN) this.#o.socket.close(code, reason);
    this.close();
  }

  /**
   * Idempotent. Scheduled changes stay: a client that reconnects finds them in `hello`.
   * `terminate` drops the TCP connection at once (server shutdown: no close handshake to wait for).
   * Every step runs even if one throws.
   */
  close(terminate = false): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#expiryTimer) clearTimeout(this.#expiryTimer);
    if (this.#resumeTimer) clearTimeout(this.#resumeTimer);
    if (this.#waitTimer) clearTimeout(this.#waitTimer);
    const steps = [
      () => this.#unsubscribe(),
      () => {
        if (terminate) this.#o.socket.terminate();
        else if (this.#o.socket.readyState === WS_OPEN) this.#o.socket.close(CLOSE_CODES.goingAway, 'closing');
      },
      ...this.#closeListeners,
    ];
    for (const step of steps) {
      try {
        step();
      } catch (err) {
        this.#log.error({ err }, 'close() | a step failed');
      }
    }
  }
}
