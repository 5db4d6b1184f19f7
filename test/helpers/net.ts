import { request } from 'node:http';
import net from 'node:net';

/** Asks the OS for a free TCP port on 127.0.0.1 (bind to 0, read it, release it). */
export async function freePort(): Promise<number> {
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
