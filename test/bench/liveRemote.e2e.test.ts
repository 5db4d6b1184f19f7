/**
 * The operator's latency benchmark against a deployment, run as operators run it
 * (`npm run bench -- live --url … --key …`, here `node --import tsx bench/run.ts …`) against a
 * second `reverie serve` process on loopback: it creates a stream, measures glass-to-glass beside
 * the direct baseline, prints the node's per-stage latency from the status API, writes its JSON,
 * and deletes the stream.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { freePort } from '../helpers/net.ts';
import { startServerProcess } from '../helpers/serverProcess.ts';

const run = promisify(execFile);
const ROOT = new URL('../..', import.meta.url).pathname;

t.test('npm run bench -- live --url --key measures a deployment and cleans up after itself', { timeout: 180_000 }, async (t) => {
  const port = await freePort();
  const server = await startServerProcess(t, { env: { PORT: String(port), HOST: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1' } });
  const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/run.ts'), 'live', '--url', server.url, '--key', server.key, '--seconds', '3', '--size', '384'], { cwd: ROOT, timeout: 150_000 });
  t.match(stdout, /direct Chromium → Chromium \(baseline\)/, 'the baseline row');
  t.match(stdout, new RegExp(`through 127\\.0\\.0\\.1:${port}`), 'the deployment row');
  t.match(stderr, /live bench → .*\[#+\] 6\/6/, 'a progress bar on stderr');
  const result = JSON.parse(readFileSync(join(ROOT, 'bench/results/live-remote-latest.json'), 'utf8')) as {
    result: { url: string; g2g: { n: number; p50: number }; direct: { n: number }; stages: Record<string, { p50: number }>; state: string };
  };
  t.equal(result.result.url, server.url);
  t.ok(result.result.g2g.n > 20, `stamps read through the deployment (${result.result.g2g.n} frames)`);
  t.ok(result.result.g2g.p50 > 0 && result.result.g2g.p50 < 1000, `glass-to-glass p50 ${result.result.g2g.p50.toFixed(1)} ms`);
  t.ok(result.result.direct.n > 20, 'and the direct baseline in the same run');
  t.ok(result.result.stages['node']?.p50 !== undefined, `the node's per-stage latency from the status API (node p50 ${result.result.stages['node']?.p50.toFixed(1)} ms)`);
  t.equal(result.result.state, 'ONLINE');
  const list = await server.api('GET', '/v1/streams?limit=100');
  t.same((list.body as { data: unknown[] }).data, [], 'the benchmark deleted its stream');
});
