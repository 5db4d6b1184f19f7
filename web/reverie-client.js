// Reverie's browser client: one ES module, no build step (types in reverie-client.d.ts).
//
//   import { ReverieClient } from '/web/reverie-client.js';
//   const api = new ReverieClient({ baseUrl: location.origin, apiKey });
//   const stream = await api.createStream({ params: { prompt: 'a forest' } });
//   const pub = api.publish(stream, await navigator.mediaDevices.getUserMedia({ video: true }));
//   const player = api.play(stream, document.querySelector('video'));
//   const control = api.control(stream.id);            // WebSocket, reconnects with backoff
//   const ack = await control.update({ prompt: 'a desert' });
//   control.addEventListener('stats', (e) => console.log(e.detail.output_fps));
//
// Every connection (control socket, WHIP publisher, WHEP player) reconnects on its own after a
// network failure, with exponential backoff and jitter, until closed. docs/control.md describes
// the control messages.

/** Backoff defaults, ms: first retry after ~250 ms, doubling, at most 10 s between tries. */
export const BACKOFF = Object.freeze({ initialMs: 250, maxMs: 10_000, factor: 2, jitter: 0.25 });

/** The delay before retry number `attempt` (0-based), with ±jitter so many clients spread out. */
export function backoffDelay(attempt, opts = BACKOFF) {
  const base = Math.min(opts.maxMs, opts.initialMs * opts.factor ** attempt);
  return Math.round(base * (1 - opts.jitter + Math.random() * 2 * opts.jitter));
}

/** An API error in the Area B envelope (`code`, `status`, `details`…). */
export class ReverieError extends Error {
  constructor(envelope) {
    super(envelope?.error ?? 'request failed');
    this.name = 'ReverieError';
    this.code = envelope?.code ?? 'UNKNOWN';
    this.status = envelope?.status ?? 0;
    this.details = envelope?.details ?? null;
    this.envelope = envelope;
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });

/** Resolves once ICE gathering is complete (2 s at most: host candidates come first). */
async function gathered(pc) {
  if (pc.iceGatheringState === 'complete') return;
  await new Promise((resolve) => {
    const done = () => pc.iceGatheringState === 'complete' && resolve();
    pc.addEventListener('icegatheringstatechange', done);
    setTimeout(resolve, 2000);
  });
}

/** Non-trickle WHIP/WHEP offer → answer; returns the session URL (for DELETE). */
async function exchange(pc, url, token) {
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const headers = { 'content-type': 'application/sdp' };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await fetch(url, { method: 'POST', headers, body: pc.localDescription.sdp });
  const body = await res.text();
  if (res.status !== 201) {
    const err = new Error(`${res.status}: ${body.trim()}`);
    err.status = res.status;
    throw err;
  }
  await pc.setRemoteDescription({ type: 'answer', sdp: body });
  return new URL(res.headers.get('location') ?? '', url).toString();
}

/**
 * A WebRTC session (WHIP publisher or WHEP player) that keeps itself up: when the peer
 * connection fails, or stays disconnected for `graceMs`, it is replaced with backoff. Events:
 * `state` (detail: 'connecting' | 'connected' | 'reconnecting' | 'closed'), `error`.
 * Refusals that retrying cannot fix (401, 403, 404) stop it.
 */
class RtcSession extends EventTarget {
  #open;
  #abort = new AbortController();
  #graceMs;
  /** A publisher's stream key: the server wants it on the session's DELETE too. */
  #token;
  pc = null;
  url = null;
  state = 'connecting';
  reconnects = 0;

  constructor(open, { graceMs = 3000, token } = {}) {
    super();
    this.#open = open;
    this.#graceMs = graceMs;
    this.#token = token;
    /** Resolves on the first connection; rejects when the server refuses it for good (401/403/404). */
    this.ready = new Promise((resolve, reject) => {
      this.#first = { resolve, reject };
    });
    void this.#run();
  }
  #first;

  #setState(state) {
    if (this.state === state) return;
    this.state = state;
    this.dispatchEvent(new CustomEvent('state', { detail: state }));
  }

  async #run() {
    let attempt = 0;
    let first = true;
    while (!this.#abort.signal.aborted) {
      const pc = new RTCPeerConnection();
      this.pc = pc;
      try {
        this.url = await this.#open(pc);
        attempt = 0;
        this.#setState('connected');
        if (first) {
          first = false;
          this.#first.resolve(this);
        }
        await this.#untilBroken(pc);
      } catch (err) {
        this.dispatchEvent(new CustomEvent('error', { detail: err }));
        if ([401, 403, 404].includes(err?.status)) {
          pc.close();
          this.close();
          if (first) this.#first.reject(err);
          return;
        }
      }
      pc.close();
      this.#hangUp();
      if (this.#abort.signal.aborted) break;
      this.#setState('reconnecting');
      this.reconnects++;
      await sleep(backoffDelay(attempt++), this.#abort.signal);
    }
  }

  /** Resolves when the connection fails, or stays disconnected past the grace period, or on close. */
  #untilBroken(pc) {
    return new Promise((resolve) => {
      let timer = null;
      const check = () => {
        const s = pc.connectionState;
        if (s === 'failed' || s === 'closed') return finish();
        if (s === 'disconnected') timer ??= setTimeout(finish, this.#graceMs);
        else if (timer) (clearTimeout(timer), (timer = null));
      };
      const finish = () => {
        clearTimeout(timer);
        pc.removeEventListener('connectionstatechange', check);
        resolve();
      };
      pc.addEventListener('connectionstatechange', check);
      this.#abort.signal.addEventListener('abort', finish, { once: true });
      check();
    });
  }

  /** Ends the session (DELETE on its URL) and stops reconnecting. Idempotent. */
  close() {
    if (this.#abort.signal.aborted) return;
    this.#abort.abort();
    this.pc?.close();
    this.#hangUp();
    this.#setState('closed');
  }

  /** DELETE on the session URL (with the stream key for a publisher's session), once. */
  #hangUp() {
    const url = this.url;
    if (!url) return;
    this.url = null;
    const headers = this.#token ? { authorization: `Bearer ${this.#token}` } : {};
    void fetch(url, { method: 'DELETE', headers }).catch(() => {});
  }
}

/**
 * The per-stream control WebSocket, reconnecting with backoff. Events (CustomEvent, payload in
 * `detail`): `open` (the hello), `status`, `stats`, `ack`, `queued`, `scheduled`, `tempo`,
 * `transition_done`, `error` (server error envelopes, and socket failures), `close` (each drop;
 * detail { code, willReconnect }), and `message` for everything.
 * `update()` resolves with the ack (a scheduled one: when applied) or rejects with a ReverieError.
 */
export class ControlChannel extends EventTarget {
  #url;
  #getToken;
  #ws = null;
  #closed = false;
  #attempt = 0;
  #waiting = new Map();
  #outbox = [];
  #seq = 0;
  #renewTimer = null;
  /** server clock − local clock, ms (from pings; 0 until the first). */
  clockOffset = 0;
  connected = false;
  reconnects = 0;
  /** The last status and stats pushed. */
  status = null;
  stats = null;

  /**
   * @param url  ws(s)://host/v1/streams/{id}/control
   * @param getToken  async () => control token (asked again for every connection)
   */
  constructor(url, getToken) {
    super();
    this.#url = url;
    this.#getToken = getToken;
    this.ready = new Promise((resolve) => this.addEventListener('open', () => resolve(this), { once: true }));
    void this.#connect();
  }

  /** The server's clock now, ms since the epoch (for `at` times and beat phases). */
  serverNow() {
    return Date.now() + this.clockOffset;
  }

  async #connect() {
    if (this.#closed) return;
    let token;
    try {
      token = await this.#getToken();
    } catch (err) {
      this.#emit('error', err);
      if (err instanceof ReverieError && (err.status === 401 || err.status === 404)) return this.close();
      return this.#retry();
    }
    if (this.#closed) return;
    const ws = new WebSocket(`${this.#url}${this.#url.includes('?') ? '&' : '?'}token=${encodeURIComponent(token)}`);
    this.#ws = ws;
    ws.onmessage = (e) => this.#onMessage(JSON.parse(e.data));
    ws.onclose = (e) => {
      if (this.#ws !== ws) return;
      this.#ws = null;
      clearTimeout(this.#renewTimer);
      // 4404: the stream was deleted; nothing to reconnect to.
      if (e.code === 4404) {
        this.#emit('close', { code: e.code, willReconnect: false });
        return this.close();
      }
      const was = this.connected;
      this.connected = false;
      this.#emit('close', { code: e.code, willReconnect: !this.#closed });
      if (was) this.#attempt = 0;
      this.#retry();
    };
    ws.onerror = () => {};
  }

  /**
   * A socket opened with a token ends when the token does (close 4401): 10 s before, a fresh
   * token is sent on it (`token` message) and the socket stays open.
   */
  #scheduleRenewal(expiresAt) {
    clearTimeout(this.#renewTimer);
    if (typeof expiresAt !== 'number') return;
    const ws = this.#ws;
    const inMs = Math.max(1000, expiresAt - this.clockOffset - Date.now() - 10_000);
    this.#renewTimer = setTimeout(async () => {
      try {
        const token = await this.#getToken();
        if (this.#ws === ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'token', token }));
      } catch (err) {
        this.#emit('error', err);
      }
    }, inMs);
  }

  #retry() {
    if (this.#closed) return;
    this.reconnects++;
    setTimeout(() => void this.#connect(), backoffDelay(this.#attempt++));
  }

  #emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  #onMessage(m) {
    this.#emit('message', m);
    switch (m.type) {
      case 'hello': {
        this.connected = true;
        this.clockOffset = m.server_time - Date.now();
        // Updates sent on the old socket and never answered go again (params updates are
        // idempotent: a repeat changes nothing), then what waited while the socket was down.
        const unanswered = [...this.#waiting.values()].filter((w) => !w.isQueued && w.socket !== this.#ws).map((w) => w.msg);
        const outbox = this.#outbox.splice(0);
        for (const msg of [...unanswered.filter((m) => !outbox.includes(m)), ...outbox]) this.#sendNow(msg);
        this.ping();
        this.#scheduleRenewal(m.expires_at);
        this.#emit('open', m);
        return;
      }
      case 'token':
        this.#scheduleRenewal(m.expires_at);
        break;
      case 'pong':
        if (typeof m.client_time === 'number') {
          const now = Date.now();
          // The server read its clock about half a round trip ago.
          this.clockOffset = m.server_time + (now - m.client_time) / 2 - now;
        }
        return;
      case 'ack':
        this.#settle(m.id, (w) => w.resolve(m));
        break;
      case 'queued': {
        const w = this.#waiting.get(m.id);
        if (w) {
          // The server holds it now (across reconnects too): never send it again.
          w.isQueued = true;
          w.queued?.(m);
        }
        break;
      }
      case 'error':
        if (m.id) this.#settle(m.id, (w) => w.reject(new ReverieError(m.error)));
        break;
      case 'status':
        this.status = m.data;
        break;
      case 'stats':
        this.stats = m;
        break;
    }
    this.#emit(m.type, m);
  }

  #settle(id, fn) {
    const w = this.#waiting.get(id);
    if (!w) return;
    this.#waiting.delete(id);
    fn(w);
  }

  #sendNow(msg) {
    const w = msg.type === 'update' ? this.#waiting.get(msg.id) : undefined;
    if (w) w.socket = this.#ws;
    this.#ws.send(JSON.stringify(msg));
  }

  #send(msg) {
    if (this.#closed) throw new Error('control channel closed');
    if (this.connected && this.#ws?.readyState === WebSocket.OPEN) this.#sendNow(msg);
    // Held while reconnecting; only the last 100 (a show controller's latest intent matters most).
    else if (this.#outbox.push(msg) > 100) this.#outbox.shift();
  }

  /**
   * Sends a partial params update. Options: `at` (server-clock ms), `onBeat` (true, { every: n }
   * or { every: 'bar' }), `transition` ({ steps, method }), `tempo`, `id`, `onQueued(scheduledView)`.
   */
  update(params, opts = {}) {
    const id = opts.id ?? `c${Date.now().toString(36)}${(this.#seq++).toString(36)}`;
    const msg = { type: 'update', id, params };
    if (opts.at !== undefined) msg.at = opts.at;
    if (opts.onBeat !== undefined) msg.on_beat = opts.onBeat;
    if (opts.transition) msg.transition = opts.transition;
    if (opts.tempo) msg.tempo = opts.tempo;
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject, queued: opts.onQueued, msg, isQueued: false, socket: null });
      this.#send(msg);
    });
  }

  /** Sets the stream's tempo: { bpm, phase, beats_per_bar } or { tempo_from_song, phase }. */
  setTempo(tempo) {
    this.#send({ type: 'tempo', ...tempo });
  }

  cancel(id) {
    this.#send({ type: 'cancel', id });
  }

  /** Measures the clock offset again (done on every connect). */
  ping() {
    if (this.connected) this.#ws.send(JSON.stringify({ type: 'ping', client_time: Date.now() }));
  }

  /** Closes the socket and stops reconnecting; pending updates reject. Idempotent. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#renewTimer);
    this.#ws?.close(1000, 'client closed');
    for (const w of this.#waiting.values()) w.reject(new Error('control channel closed'));
    this.#waiting.clear();
  }
}

/** REST + live helpers for one Reverie server. */
export class ReverieClient {
  /**
   * @param opts.baseUrl  the API's origin (default: this page's)
   * @param opts.apiKey   an API key (server-side pages, tools); or
   * @param opts.getControlToken  async (streamId) => token, for pages that must not hold a key
   */
  constructor({ baseUrl = globalThis.location?.origin, apiKey, getControlToken } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.apiKey = apiKey;
    this.getControlToken = getControlToken;
  }

  async request(method, path, body) {
    const headers = {};
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${this.baseUrl}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const json = await res.json().catch(() => ({}));
    if (!res.ok) throw new ReverieError({ status: res.status, ...json });
    return json;
  }

  capabilities() {
    return this.request('GET', '/v1/capabilities');
  }
  createStream(body = {}) {
    return this.request('POST', '/v1/streams', body);
  }
  getStream(id) {
    return this.request('GET', `/v1/streams/${encodeURIComponent(id)}`);
  }
  updateStream(id, params) {
    return this.request('PATCH', `/v1/streams/${encodeURIComponent(id)}`, { params });
  }
  async status(id) {
    return (await this.request('GET', `/v1/streams/${encodeURIComponent(id)}/status`)).data;
  }
  deleteStream(id) {
    return this.request('DELETE', `/v1/streams/${encodeURIComponent(id)}`);
  }
  /** A 60-second token for the stream's control socket (needs the API key). */
  controlToken(id) {
    return this.request('POST', `/v1/streams/${encodeURIComponent(id)}/control-token`);
  }

  /** Opens the stream's control channel (reconnects by itself until closed). */
  control(streamId) {
    const url = `${this.baseUrl.replace(/^http/, 'ws')}/v1/streams/${encodeURIComponent(streamId)}/control`;
    const getToken = this.getControlToken ? () => this.getControlToken(streamId) : async () => (await this.controlToken(streamId)).token;
    return new ControlChannel(url, getToken);
  }

  /** Publishes a MediaStream to the stream over WHIP, republishing after network failures. */
  publish(stream, media, opts = {}) {
    return new RtcSession(async (pc) => {
      for (const track of media.getTracks()) pc.addTransceiver(track, { direction: 'sendonly', streams: [media] });
      return exchange(pc, stream.whip_url, stream.stream_key);
    }, { ...opts, token: stream.stream_key });
  }

  /** Plays the stream's output over WHEP into `video`, reconnecting after network failures. */
  play(stream, video, opts = {}) {
    const whep = stream.output_stream_url ?? `${this.baseUrl}/live/${encodeURIComponent(stream.output_playback_id)}/whep`;
    return new RtcSession(async (pc) => {
      pc.addTransceiver('video', { direction: 'recvonly' });
      pc.addTransceiver('audio', { direction: 'recvonly' });
      const media = new MediaStream();
      pc.ontrack = (e) => {
        media.addTrack(e.track);
        video.srcObject = media;
        video.play().catch(() => {});
      };
      return exchange(pc, whep);
    }, opts);
  }
}
