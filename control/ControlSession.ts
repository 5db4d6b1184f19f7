/**
 * One client's control WebSocket on one stream: reads its messages (updates, tempo, cancel,
 * ping), answers each, and pushes the stream's status when it changes and its stats once a second,
 * so clients never poll. Created by the control route once the upgrade is authenticated.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Account } from '../store/index.ts';
import { ClientMessageSchema, type ClientMessage } from './ControlMessages.ts';
import { fieldPath, toApiError } from './ErrorReplies.ts';
import { streamError, type ApiError } from '../errors/index.ts';
import type { ControlEvent, StatusData, StreamControl, StreamService, Tempo } from '../streams/index.ts';
import { WS_OPEN, type WebSocketLike } from './WebSockets.ts';

export const SESSION_TIMING = {
  /** How often the status is read for changes, ms (a change reaches the client within this). */
  statusPollMs: 250,
  /** Stats push period, ms. */
  statsMs: 1000,
  /** Keepalive ping period, ms; a socket that misses two pongs is dropped (dead network path). */
  pingMs: 15_000,
  /** Bytes queued to a slow client above which stats pushes are skipped (acks and errors never are). */
  maxBufferedBytes: 1 << 20,
} as const;

export interface ControlSessionOptions {
  socket: WebSocketLike;
  account: Account;
  streamId: string;
  streams: StreamService;
  control: StreamControl;
  logger: Logger;
  /** W3C trace id of the upgrade request, carried by every error envelope. */
  traceId: string;
  now?: () => number;
}

const tempoView = (t: Tempo) => ({ bpm: t.bpm, phase: t.phase, beats_per_bar: t.beatsPerBar, song_id: t.songId });

export class ControlSession {
  readonly id = `ctl_${randomBytes(9).toString('base64url')}`;
  readonly #o: ControlSessionOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #timers: NodeJS.Timeout[] = [];
  readonly #unsubscribe: () => void;
  #lastStatusKey = '';
  #status: StatusData | null = null;
  #polling = false;
  #missedPongs = 0;
  #closed = false;
  /** Messages handled one at a time, in order (an update never overtakes the one sent before it). */
  #queue: Promise<void> = Promise.resolve();

  constructor(opts: ControlSessionOptions) {
    this.#o = opts;
    this.#now = opts.now ?? Date.now;
    this.#log = opts.logger.child({ module: 'ControlSession', streamId: opts.streamId });
    const ws = opts.socket;
    this.#unsubscribe = opts.control.on(opts.streamId, (e) => this.#onControl(e));
    ws.on('message', (data, isBinary) => {
      this.#queue = this.#queue.then(() => this.#onMessage(data, isBinary));
    });
    ws.on('close', () => this.close());
    ws.on('error', (err) => this.#log.debug({ err }, 'socket error'));
    ws.on('pong', () => {
      this.#missedPongs = 0;
    });
    const tempo = opts.control.tempo(opts.streamId);
    this.#send({
      type: 'hello',
      session_id: this.id,
      stream_id: opts.streamId,
      server_time: this.#now(),
      tempo: tempo ? tempoView(tempo) : null,
      scheduled: opts.control.scheduled(opts.streamId),
    });
    this.#timers.push(setInterval(() => void this.#poll(false), SESSION_TIMING.statusPollMs));
    this.#timers.push(setInterval(() => void this.#poll(true), SESSION_TIMING.statsMs));
    this.#timers.push(
      setInterval(() => {
        if (++this.#missedPongs > 2) {
          this.#log.info('keepalive() | no pong: dropping the socket');
          ws.terminate();
          return;
        }
        ws.ping();
      }, SESSION_TIMING.pingMs),
    );
    void this.#poll(false);
  }

  #send(msg: unknown): void {
    if (this.#closed || this.#o.socket.readyState !== WS_OPEN) return;
    this.#o.socket.send(JSON.stringify(msg));
  }

  #sendError(id: string | null, err: ApiError): void {
    this.#send({
      type: 'error',
      id,
      error: { success: false, error: err.message, code: err.code, status: err.status, details: err.details ?? null, requestId: id ?? this.id, traceId: this.#o.traceId },
    });
  }

  /** Status on change (state, params, restarts, errors, schedule) and stats on the stats tick. */
  async #poll(stats: boolean): Promise<void> {
    if (this.#closed || this.#polling) return;
    this.#polling = true;
    try {
      const data = await this.#o.streams.status(this.#o.account, this.#o.streamId);
      const scheduled = this.#o.control.scheduled(this.#o.streamId);
      const full: StatusData = scheduled.length > 0 ? { ...data, scheduled_updates: scheduled } : data;
      this.#status = full;
      const inf = full.inference_status;
      const key = JSON.stringify([full.state, inf.last_params_hash, inf.restart_count, inf.last_error, scheduled.map((s) => s.id)]);
      if (key !== this.#lastStatusKey) {
        this.#lastStatusKey = key;
        this.#send({ type: 'status', data: full });
      }
      if (stats && this.#o.socket.bufferedAmount < SESSION_TIMING.maxBufferedBytes) {
        this.#send({
          type: 'stats',
          time: this.#now(),
          state: full.state,
          input_fps: inf.input_fps,
          output_fps: inf.output_fps,
          stage_latency_ms: full.stage_latency_ms ?? {},
          viewers: full.viewers ?? 0,
          frames_out: full.frames_out ?? 0,
          ingest_quality: full.gateway_status.ingest_metrics.stats.conn_quality,
        });
      }
    } catch (err) {
      // The stream was deleted (404) or the store is away: say so once and end the session.
      const apiErr = toApiError('streams', err);
      this.#sendError(null, apiErr);
      if (apiErr.status === 404) this.#o.socket.close(4404, 'stream not found');
    } finally {
      this.#polling = false;
    }
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
      const isPing = (raw as { type?: unknown } | undefined)?.type === 'ping';
      // Every message but ping counts against PATCH's budget, invalid ones included (as PATCH counts them).
      if (!isPing) await this.#o.streams.checkUpdateRate(this.#o.account, this.#o.streamId, 'patch');
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

  /** The last status read (null before the first). */
  get status(): StatusData | null {
    return this.#status;
  }

  /**
   * Idempotent. Scheduled changes stay: a client that reconnects finds them in `hello`.
   * `terminate` drops the TCP connection at once (server shutdown: no close handshake to wait for).
   */
  close(terminate = false): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const t of this.#timers) clearInterval(t);
    this.#unsubscribe();
    if (terminate) this.#o.socket.terminate();
    else if (this.#o.socket.readyState === WS_OPEN) this.#o.socket.close(1001, 'closing');
  }
}
