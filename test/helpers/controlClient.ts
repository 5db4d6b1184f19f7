/**
 * A test client for the control WebSocket (`ws`, Node side): collects every message and lets a
 * test wait for the next one matching a predicate, with a bounded wait. Resolves once open, or
 * rejects with the HTTP status of a refused upgrade.
 */
import { connectWebSocket, type WebSocketLike } from '../../control/WebSockets.ts';

type Json = Record<string, any>;

export interface ControlClient {
  ws: WebSocketLike;
  all: Json[];
  send(msg: unknown): void;
  /** The first message (received since the last one this returned) matching `pred`. */
  next(pred: (m: Json) => boolean, timeoutMs?: number): Promise<Json>;
}

export function openControl(t: { teardown(fn: () => unknown): void }, url: string, headers: Record<string, string> = {}): Promise<ControlClient> {
  const ws = connectWebSocket(url, headers);
  const all: Json[] = [];
  let cursor = 0;
  const waiters = new Set<() => void>();
  ws.on('message', (data) => {
    all.push(JSON.parse(data.toString('utf8')) as Json);
    for (const w of [...waiters]) w();
  });
  t.teardown(() => ws.terminate());
  const client: ControlClient = {
    ws,
    all,
    send: (msg) => ws.send(JSON.stringify(msg)),
    next: (pred, timeoutMs = 5000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          for (let i = cursor; i < all.length; i++) {
            if (pred(all[i]!)) {
              cursor = i + 1;
              waiters.delete(check);
              clearTimeout(timer);
              resolve(all[i]!);
              return;
            }
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no matching message within ${timeoutMs} ms; got ${JSON.stringify(all.slice(cursor)).slice(0, 500)}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      }),
  };
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(client));
    // A refused upgrade rejects with its HTTP status and JSON body (`status`, `body`).
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => reject(Object.assign(new Error(`upgrade refused ${res.statusCode}`), { status: res.statusCode, body: JSON.parse(body || '{}') as Json })));
    });
    ws.once('error', (err) => reject(err));
  });
}
