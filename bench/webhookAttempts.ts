/**
 * `npm run bench -- webhookAttempts [--deliveries 2000] [--redis]`: what the per-delivery attempts
 * log costs the deliverer's bookkeeping. After every send the deliverer updates the delivery
 * record; it now also appends the send to the attempts log. Measured side by side in one run, on
 * the same store, taking turns per delivery so load drifts hit all alike:
 * - `update`: `updateDelivery` alone (the bookkeeping before the log);
 * - `update + log`: `updateDelivery` with the send appended to the log in the same transaction
 *   (a 1 KiB body, keep 20): what the deliverer does;
 * - `addAttempt, update`: the same as two store calls (two commits), for comparison.
 * Reports p50/p95 per send and the ratio; also `listAttempts` of a full 20-entry log.
 * Embedded store always; `--redis` adds a Redis store on a redis-server started here.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore, RedisStore } from '../store/index.ts';
import type { Store, WebhookDeliveryRecord } from '../store/index.ts';
import { startRedis } from '../test/helpers/redis.ts';
import { printTable, progress, summarize, writeResult } from './lib.ts';
import type { Row } from './lib.ts';

const KEEP = 20;
const BODY = 'x'.repeat(1024);

function delivery(i: number, endpointId: string): WebhookDeliveryRecord {
  const at = new Date(Date.now() - 60_000).toISOString();
  return {
    id: `dlv_bench${String(i).padStart(6, '0')}`,
    endpointId,
    accountId: 'acc_bench',
    eventId: `evt_bench${i}`,
    eventType: 'stream.ended',
    streamId: 'str_bench',
    payload: JSON.stringify({ id: `evt_bench${i}`, type: 'stream.ended', data: { stream_id: 'str_bench' } }),
    status: 'pending',
    attempts: 0,
    responseStatus: null,
    responseBody: null,
    error: null,
    createdAt: at,
    updatedAt: at,
    lastAttemptAt: null,
    nextAttemptAt: at,
  };
}

async function measure(label: string, store: Store, n: number): Promise<Row[]> {
  const endpointId = 'whk_bench';
  const all = Array.from({ length: n }, (_, i) => delivery(i, endpointId));
  for (let i = 0; i < all.length; i += 200) await store.webhooks.createDeliveries(all.slice(i, i + 200));
  const plain: number[] = [];
  const logged: number[] = [];
  const separate: number[] = [];
  const bar = progress(label, n);
  for (const [i, d] of all.entries()) {
    const nowIso = new Date().toISOString();
    const patch = { attempts: 1, status: 'succeeded' as const, responseStatus: 200, responseBody: 'ok', error: null, lastAttemptAt: nowIso, nextAttemptAt: null, updatedAt: nowIso };
    const attempt = { deliveryId: d.id, attempt: 1, trigger: 'scheduled' as const, startedAt: nowIso, durationMs: 3.2, responseStatus: 200, responseBody: BODY, error: null };
    const t0 = performance.now();
    if (i % 3 === 0) {
      await store.webhooks.updateDelivery(d.id, patch);
      plain.push(performance.now() - t0);
    } else if (i % 3 === 1) {
      await store.webhooks.updateDelivery(d.id, patch, { attempt, keep: KEEP });
      logged.push(performance.now() - t0);
    } else {
      await store.webhooks.addAttempt(attempt, KEEP);
      await store.webhooks.updateDelivery(d.id, patch);
      separate.push(performance.now() - t0);
    }
    bar.tick();
  }
  bar.done();
  // A full log (20 entries, 1 KiB bodies) read back, as GET …/attempts does.
  const full = all[1] as WebhookDeliveryRecord;
  for (let k = 0; k < KEEP + 5; k++) {
    await store.webhooks.addAttempt({ deliveryId: full.id, attempt: k + 2, trigger: 'resend', startedAt: new Date().toISOString(), durationMs: 1, responseStatus: 500, responseBody: BODY, error: 'http_status: 500' }, KEEP);
  }
  const reads: number[] = [];
  for (let k = 0; k < 200; k++) {
    const t0 = performance.now();
    const log = await store.webhooks.listAttempts(full.id);
    reads.push(performance.now() - t0);
    if (log.length !== KEEP) throw new Error(`expected ${KEEP} entries, got ${log.length}`);
  }
  const a = summarize(plain);
  const b = summarize(logged);
  const c = summarize(separate);
  const r = summarize(reads);
  return [
    { store: label, variant: 'update', n: a.n, p50_ms: a.p50, p95_ms: a.p95, per_s: 1000 / a.mean, ratio_p50: 1 },
    { store: label, variant: 'update + log', n: b.n, p50_ms: b.p50, p95_ms: b.p95, per_s: 1000 / b.mean, ratio_p50: b.p50 / a.p50 },
    { store: label, variant: 'addAttempt, update', n: c.n, p50_ms: c.p50, p95_ms: c.p95, per_s: 1000 / c.mean, ratio_p50: c.p50 / a.p50 },
    { store: label, variant: `listAttempts (${KEEP} × 1 KiB)`, n: r.n, p50_ms: r.p50, p95_ms: r.p95, per_s: 1000 / r.mean, ratio_p50: '' },
  ];
}

export default async function main(args: Map<string, string>): Promise<void> {
  const n = Number(args.get('deliveries') ?? 2000);
  const dir = mkdtempSync(join(tmpdir(), 'rv-bench-attempts-'));
  const rows: Row[] = [];
  try {
    const embedded = EmbeddedStore.open({ dataDir: join(dir, 'embedded') });
    try {
      rows.push(...(await measure('embedded', embedded, n)));
    } finally {
      await embedded.close();
    }
    if (args.has('redis')) {
      const redis = await startRedis();
      const store = await RedisStore.open({ url: redis.url, prefix: 'bench:' });
      try {
        rows.push(...(await measure('redis', store, n)));
      } finally {
        await store.close();
        await redis.teardown();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  printTable(`webhook attempts log: bookkeeping per send (${n} deliveries, variants taking turns)`, rows);
  console.log(`results: ${writeResult('webhookAttempts', { deliveries: n, keep: KEEP, rows })}`);
}
