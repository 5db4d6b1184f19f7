import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import net from 'node:net';

/** Lowest port freePort picks: below it sit well-known and registered services' ports. */
const PICK_FROM = 10_000;

/** First port of the kernel's ephemeral range (outgoing connections' local ports), 32768 by default. */
function ephemeralStart(): number {
  try {
    const lo = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(lo) && lo > 0 ? lo : 32_768;
  } catch {
    return 32_768;
  }
}

/** Whether a TCP listener can bind `port` on 127.0.0.1 now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A free TCP port on 127.0.0.1 for a server the caller starts next, picked at random below the
 * ephemeral range: a port the kernel hands out for bind(0) is in that range, where every outgoing
 * connection of the tests running beside this one also takes its local port, and one of them
 * took such a port between the pick and the server's listen (EADDRINUSE in a CI run). Below the
 * range only explicit binds compete.
 */
export async function freePort(): Promise<number> {
  const below = ephemeralStart();
  for (let i = 0; i < 50 && below - PICK_FROM > 1_000; i++) {
    // Leave room for callers that also take the next port (a UDP range of two).
    const port = PICK_FROM + Math.floor(Math.random() * (below - PICK_FROM - 2));
    if (await bindable(port)) return port;
  }
  // A kernel whose ephemeral range starts low: the kernel's own pick.
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface Sent {
  status: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

/** One HTTP request to `base` from the local source address `from` (default: the kernel's choice). */
export async function send(
  base: string,
  opts: { method: string; path: string; from?: string; headers?: Record<string, string>; body?: string; timeoutMs?: number },
): Promise<Sent> {
  const u = new URL(opts.path, base);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: `${u.pathname}${u.search}`,
        method: opts.method,
        headers: { ...(opts.body !== undefined ? { 'content-length': String(Buffer.byteLength(opts.body)) } : {}), ...opts.headers },
        agent: false,
        timeout: opts.timeoutMs ?? 15_000,
        ...(opts.from ? { localAddress: opts.from } : {}),
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${opts.method} ${opts.path}: no answer in ${opts.timeoutMs ?? 15_000} ms`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}
