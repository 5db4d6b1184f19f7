/**
 * An OBS-like publisher (libdatachannel) connects to a real node on the first try over a link that
 * reorders and drops, 20 attempts of 20, and over 150 ms RTT, 20 of 20 (a load suite: `npm run
 * test:load` runs these files one at a time). Each attempt publishes, waits for the node's first
 * media after the answer (at most 10 s: the node gives up on a silent session then), ends with DELETE and waits for
 * the node to let the session go. The smaller version in the main suite:
 * test/media/webrtc/DtlsHandshakeOrder.test.ts. Decision 0022.
 */
import t from 'tap';
import { impairedLink } from '../helpers/impairedPublish.ts';

const ATTEMPTS = 20;
const LIMIT_MS = 10_000;

t.test(`an OBS-like publisher connects on the first try in ${ATTEMPTS} of ${ATTEMPTS} attempts over 3 % loss and ±10 ms jitter that reorders, and over 150 ms RTT`, { timeout: 900_000 }, async (t) => {
  const lossy = { delayMs: 40, jitterMs: 10, lossPct: 3 };
  const link = await impairedLink(t, lossy, lossy);
  for (const [name, imp] of [
    ['40 ± 10 ms each way, 3 % loss', lossy],
    ['75 ± 10 ms each way (150 ms RTT), 3 % loss', { delayMs: 75, jitterMs: 10, lossPct: 3 }],
  ] as const) {
    link.set(imp, imp);
    const ms: number[] = [];
    const failed: string[] = [];
    for (let i = 0; i < ATTEMPTS; i++) {
      const a = await link.attempt(LIMIT_MS);
      ms.push(a.ms);
      if (!a.connected) failed.push(`attempt ${i}: publisher ${a.state}`);
    }
    const sorted = [...ms].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)];
    const p95 = sorted[Math.min(sorted.length - 1, Math.ceil(0.95 * sorted.length) - 1)];
    t.equal(failed.length, 0, `${name}: ${ATTEMPTS - failed.length} of ${ATTEMPTS} connected on the first try; answer to first media median ${median} ms, p95 ${p95} ms${failed.length ? ` (${failed.join('; ')})` : ''}`);
  }
  const reordered = link.relays.reduce((n, r) => n + r.stats().up.reordered + r.stats().down.reordered, 0);
  t.ok(reordered > 0, `the link reordered packets (${reordered})`);
});
