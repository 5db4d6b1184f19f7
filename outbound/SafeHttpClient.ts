/**
 * An HTTP(S) client for sending to addresses that users chose: webhook deliveries, admission
 * hooks and their JWKS, image fetches. It never reaches a
 * non-public address:
 * - IP-literal hosts are checked before anything is sent (Node never calls `lookup` for them);
 * - names are resolved by `AddressPolicy.lookup`, passed to the socket, so the address that is
 *   checked is the address that is dialled, on every attempt (DNS-rebinding safe);
 * - the connected peer address is checked once more on connect (defence in depth).
 * It follows no redirects (a 3xx is returned as is), cuts the whole exchange (connect, headers
 * and body) at `timeoutMs`, and keeps at most `maxResponseBytes` of the body.
 */
import http from 'node:http';
import https from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import net from 'node:net';
import type { Socket } from 'node:net';
import { AddressPolicy, BlockedAddressError, normalizeHost } from './AddressPolicy.ts';
import type { AddressPolicyOptions } from './AddressPolicy.ts';

/** Defaults for `request()`. */
export const SAFE_HTTP_DEFAULTS = {
  method: 'GET',
  /** Whole request (connect + headers + body), spec "Webhook response time": 10 seconds. */
  timeoutMs: 10_000,
  /** Body bytes kept; the rest is not read (the connection is dropped). */
  maxResponseBytes: 1024 * 1024,
} as const;

export interface SafeHttpClientOptions extends AddressPolicyOptions {
  /** Shared policy; built from `allowLoopback`/`resolve` when absent. */
  policy?: AddressPolicy;
  /** Extra trusted CA (PEM) for TLS, e.g. a test receiver's self-signed CA. Off by default. */
  ca?: string | Buffer;
  /** Allow plain `http:` URLs. Off by default (webhooks are HTTPS only). */
  allowHttp?: boolean;
  /** Keep-alive sockets per origin (default 64). Sockets are checked when they connect. */
  maxSockets?: number;
  /** Sent when the caller gives none. */
  userAgent?: string;
}

export interface SafeRequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Deadline for the whole exchange, ms. Default 10 000. */
  timeoutMs?: number;
  /** Body bytes kept, default 1 MiB; `truncated` tells when more was sent. */
  maxResponseBytes?: number;
  signal?: AbortSignal;
}

export interface SafeResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The server sent more than `maxResponseBytes`; only the first bytes were kept. */
  truncated: boolean;
  /** Request start to the end of the kept body, ms. */
  roundTripMs: number;
  /** The peer actually connected to. */
  remoteAddress: string | null;
}

/**
 * Why a request failed without an HTTP response:
 * - `invalid_url`: unparsable URL, or a scheme we do not send to;
 * - `blocked_address`: the host is, or resolves to, a non-public address;
 * - `dns`: the name did not resolve;
 * - `timeout`: no complete response within `timeoutMs`;
 * - `tls`: certificate or handshake failure;
 * - `connection`: refused, reset, unreachable;
 * - `aborted`: the caller's signal fired.
 */
export type SafeHttpErrorKind = 'invalid_url' | 'blocked_address' | 'dns' | 'timeout' | 'tls' | 'connection' | 'aborted';

export class SafeHttpError extends Error {
  override readonly name = 'SafeHttpError';
  constructor(
    readonly kind: SafeHttpErrorKind,
    message: string,
    readonly url: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export class SafeHttpClient {
  readonly policy: AddressPolicy;
  readonly #allowHttp: boolean;
  readonly #userAgent: string;
  readonly #httpsAgent: https.Agent;
  readonly #httpAgent: http.Agent;
  #closed = false;

  constructor(options: SafeHttpClientOptions = {}) {
    this.policy = options.policy ?? new AddressPolicy(options);
    this.#allowHttp = options.allowHttp ?? false;
    this.#userAgent = options.userAgent ?? 'Reverie/1.0';
    const maxSockets = options.maxSockets ?? 64;
    // The agents carry the guarded lookup, so every new socket (keep-alive or not) is checked.
    const common = { keepAlive: true, maxSockets, lookup: this.policy.lookup } as const;
    this.#httpsAgent = new https.Agent({ ...common, ...(options.ca !== undefined ? { ca: options.ca } : {}) });
    this.#httpAgent = new http.Agent(common);
  }

  /** Sends one request. Resolves with any HTTP response (3xx included); rejects with SafeHttpError. */
  async request(url: string, options: SafeRequestOptions = {}): Promise<SafeResponse> {
    if (this.#closed) throw new SafeHttpError('aborted', 'client closed', url);
    const started = performance.now();
    let target: URL;
    try {
      target = new URL(url);
    } catch (cause) {
      throw new SafeHttpError('invalid_url', `invalid URL: ${url}`, url, { cause });
    }
    const isHttps = target.protocol === 'https:';
    if (!isHttps && !(this.#allowHttp && target.protocol === 'http:')) {
      throw new SafeHttpError('invalid_url', `scheme ${target.protocol} not allowed`, url);
    }
    if (target.username !== '' || target.password !== '') {
      throw new SafeHttpError('invalid_url', 'credentials in URL not allowed', url);
    }
    // Literals never reach `lookup`; check them here (names are checked inside the socket).
    // (WHATWG parsing has already turned 2130706433, 0x7f.1, 0177.0.0.1 and 127.1 into 127.0.0.1.)
    const host = normalizeHost(target.hostname);
    if (host === '') throw new SafeHttpError('invalid_url', 'URL has no host', url);
    if (net.isIP(host) !== 0) {
      const literal = this.policy.checkAddress(host);
      if (!literal.ok) {
        throw new SafeHttpError('blocked_address', new BlockedAddressError(host, host, literal.range).message, url);
      }
    } else if (this.policy.isLocalName(host)) {
      throw new SafeHttpError('blocked_address', `${host} is a local-only name`, url);
    }

    const timeoutMs = options.timeoutMs ?? SAFE_HTTP_DEFAULTS.timeoutMs;
    const maxBytes = options.maxResponseBytes ?? SAFE_HTTP_DEFAULTS.maxResponseBytes;
    const headers: Record<string, string> = { 'user-agent': this.#userAgent, ...options.headers };
    const body = options.body === undefined ? undefined : Buffer.isBuffer(options.body) ? options.body : Buffer.from(options.body);
    if (body !== undefined) headers['content-length'] = String(body.length);

    return await new Promise<SafeResponse>((resolve, reject) => {
      let settled = false;
      let remoteAddress: string | null = null;
      const fail = (err: SafeHttpError) => {
        if (settled) return;
        settled = true;
        cleanup();
        req.destroy();
        reject(err);
      };
      const timer = setTimeout(() => fail(new SafeHttpError('timeout', `no complete response within ${timeoutMs} ms`, url)), timeoutMs);
      const onAbort = () => fail(new SafeHttpError('aborted', 'request aborted', url));
      const cleanup = () => {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
      };
      if (options.signal?.aborted) {
        clearTimeout(timer);
        reject(new SafeHttpError('aborted', 'request aborted', url));
        return;
      }
      options.signal?.addEventListener('abort', onAbort, { once: true });

      const req = (isHttps ? https : http).request(target, {
        method: options.method ?? SAFE_HTTP_DEFAULTS.method,
        headers,
        agent: isHttps ? this.#httpsAgent : this.#httpAgent,
        lookup: this.policy.lookup,
      });
      req.on('socket', (socket: Socket) => {
        const verify = () => {
          remoteAddress = socket.remoteAddress ?? null;
          const verdict = remoteAddress === null ? { ok: false as const, range: 'unknown' } : this.policy.checkAddress(remoteAddress);
          if (!verdict.ok) {
            fail(new SafeHttpError('blocked_address', `connected peer ${remoteAddress} is not publicly routable (${verdict.range})`, url));
          }
        };
        // A reused keep-alive socket is already connected (and was checked when it connected).
        if (socket.remoteAddress !== undefined && !socket.connecting) verify();
        else socket.once('connect', verify);
      });
      req.on('error', (err: NodeJS.ErrnoException) => fail(classify(err, url)));
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let kept = 0;
        let truncated = false;
        res.on('data', (chunk: Buffer) => {
          if (settled) return;
          const room = maxBytes - kept;
          if (chunk.length > room) {
            if (room > 0) chunks.push(chunk.subarray(0, room));
            kept = maxBytes;
            truncated = true;
            finish();
            res.destroy();
            return;
          }
          chunks.push(chunk);
          kept += chunk.length;
        });
        res.on('end', () => finish());
        res.on('error', (err: NodeJS.ErrnoException) => fail(classify(err, url)));
        res.on('close', () => fail(new SafeHttpError('connection', 'connection closed before the response ended', url)));
        const finish = () => {
          if (settled) return;
          settled = true;
          cleanup();
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks, kept),
            truncated,
            roundTripMs: performance.now() - started,
            remoteAddress,
          });
        };
      });
      req.end(body);
    });
  }

  /** Idempotent: drops pooled sockets; later requests fail. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#httpsAgent.destroy();
    this.#httpAgent.destroy();
  }
}

const TLS_CODES = new Set([
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'ERR_SSL_WRONG_VERSION_NUMBER',
  'EPROTO',
]);

function classify(err: NodeJS.ErrnoException, url: string): SafeHttpError {
  if (err instanceof BlockedAddressError) return new SafeHttpError('blocked_address', err.message, url, { cause: err });
  const code = err.code ?? '';
  if (code === 'ESSRF') return new SafeHttpError('blocked_address', err.message, url, { cause: err });
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'ENODATA') {
    return new SafeHttpError('dns', `DNS lookup failed: ${err.message}`, url, { cause: err });
  }
  if (TLS_CODES.has(code) || code.startsWith('ERR_TLS') || code.startsWith('ERR_SSL')) {
    return new SafeHttpError('tls', `TLS error: ${err.message}`, url, { cause: err });
  }
  return new SafeHttpError('connection', `connection failed: ${code !== '' ? code : err.message}`, url, { cause: err });
}
