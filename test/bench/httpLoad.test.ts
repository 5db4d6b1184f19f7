/**
 * The benches' HTTP load generator: a request the server never answers is abandoned after
 * `timeoutMs` and counted as an error, so the round ends on time instead of waiting on it.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { httpLoad } from '../../bench/httpLoad.ts';

t.test('a hung request is abandoned after timeoutMs, counted as an error, and the round still ends', { timeout: 60_000 }, async (t) => {
  let seen = 0;
  const hung: ServerResponse[] = [];
  // Answers every request but the fifth, which it holds open for good.
  const server = createServer((req, res) => {
    seen += 1;
    if (seen === 5) {
      hung.push(res);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;

  const t0 = performance.now();
  const result = await httpLoad({ url, seconds: 0.5, connections: 2, timeoutMs: 1_000 });
  const tookMs = performance.now() - t0;

  t.equal(hung.length, 1, 'the server held one request');
  t.equal(result.timeouts, 1, 'that request timed out');
  t.equal(result.errors, 1, 'and is the one error');
  t.ok(result.requests >= 4, `the other requests were answered (${result.requests})`);
  t.equal(result.latenciesMs.length, result.requests, 'a latency per answered request');
  // The window (0.5 s) plus the timeout (1 s) bound the round; the rest is a worker's start-up.
  t.ok(tookMs < 20_000, `the round ended (${Math.round(tookMs)} ms)`);
});
