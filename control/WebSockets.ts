/**
 * The `ws` package (RFC 6455 server and client), loaded with `createRequire` and typed here with
 * the small part we use: the package ships no types and `@types/ws` is not installed. The server
 * runs in `noServer` mode on fastify's own HTTP server (its `upgrade` event), so the WebSocket
 * shares the API's port, TLS and proxy setup.
 */
import type { IncomingMessage } from 'node:http';
import { createRequire } from 'node:module';
import type { Duplex } from 'node:stream';

/** The ready states of RFC 6455 §4.1 as `ws` numbers them. */
export const WS_OPEN = 1;

export interface WebSocketLike {
  readonly readyState: number;
  /** Bytes queued and not yet written to the socket (backpressure). */
  readonly bufferedAmount: number;
  send(data: string, cb?: (err?: Error) => void): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
  ping(): void;
  /** Stops reading the socket (TCP pushes back on the sender) until `resume()`. */
  pause(): void;
  resume(): void;
  on(event: 'message', listener: (data: Buffer, isBinary: boolean) => void): this;
  on(event: 'close', listener: (code: number, reason: Buffer) => void): this;
  on(event: 'error', listener: (err: Error) => void): this;
  on(event: 'open' | 'pong', listener: () => void): this;
  on(event: 'unexpected-response', listener: (req: unknown, res: IncomingMessage) => void): this;
  once(event: 'open', listener: () => void): this;
  once(event: 'close', listener: (code: number, reason: Buffer) => void): this;
  once(event: 'error', listener: (err: Error) => void): this;
  off(event: string, listener: (...args: never[]) => void): this;
}

export interface WebSocketServerLike {
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, cb: (ws: WebSocketLike) => void): void;
  close(cb?: () => void): void;
}

interface WsModule {
  WebSocketServer: new (opts: { noServer: true; maxPayload: number; perMessageDeflate: boolean }) => WebSocketServerLike;
  WebSocket: new (url: string, opts?: { headers?: Record<string, string>; handshakeTimeout?: number }) => WebSocketLike;
}

const ws = createRequire(import.meta.url)('ws') as WsModule;

/** A server that only upgrades the requests we hand it. `maxPayload` in bytes. */
export function createWebSocketServer(maxPayload: number): WebSocketServerLike {
  // No compression: control messages are small, and per-message deflate costs latency and memory per socket.
  return new ws.WebSocketServer({ noServer: true, maxPayload, perMessageDeflate: false });
}

/** A Node client (tests, benchmarks, show controllers written in Node). */
export function connectWebSocket(url: string, headers: Record<string, string> = {}): WebSocketLike {
  return new ws.WebSocket(url, { headers, handshakeTimeout: 10_000 });
}
