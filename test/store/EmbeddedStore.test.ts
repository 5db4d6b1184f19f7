import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { EmbeddedStore } from '../../store/EmbeddedStore.ts';
import { delivery, runContract, song } from './contract.ts';

const root = mkdtempSync(path.join(os.tmpdir(), 'rv-embedded-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

runContract(t, 'embedded', async ({ now }) => EmbeddedStore.open({ dataDir: path.join(root, `case-${n++}`), now }));

void t.test('embedded: reopening the data dir keeps every record and the schema version', { timeout: 20_000 }, async (t) => {
  const dataDir = path.join(root, 'reopen');
  const first = EmbeddedStore.open({ dataDir });
  await first.songs.create(song('sng_1', 'acc_a', Date.now()), { month: '2023-11', monthlyLimit: 5, maxActive: 5 }, {
    jobs: [{ queue: 'render', id: 'sng_1', payload: { songId: 'sng_1' } }],
  });
  await first.close();
  const second = EmbeddedStore.open({ dataDir });
  t.teardown(() => second.close());
  t.equal((await second.songs.get('sng_1'))?.id, 'sng_1');
  t.equal(await second.songs.used('acc_a', '2023-11'), 1);
  t.equal((await second.queue.stats('render')).ready, 1);
});

void t.test('embedded: upgrading moves queued delivery jobs into their deliveries (the deliveries queue)', { timeout: 20_000 }, async (t) => {
  const dataDir = path.join(root, 'upgrade');
  const now = Date.now();
  const first = EmbeddedStore.open({ dataDir });
  await first.webhooks.createDeliveries([
    delivery('dlv_1', 'whk_1', 'evt_1', now),
    delivery('dlv_2', 'whk_1', 'evt_2', now),
    delivery('dlv_3', 'whk_1', 'evt_3', now, { status: 'succeeded' }),
  ]);
  await first.close();
  // Back to the schema before the deliveries queue: a job row per pending delivery.
  const db = new Database(path.join(dataDir, 'reverie.db'));
  db.exec(`DROP INDEX deliveries_due;
    ALTER TABLE deliveries DROP COLUMN due_ms; ALTER TABLE deliveries DROP COLUMN token;
    ALTER TABLE deliveries DROP COLUMN leases; ALTER TABLE deliveries DROP COLUMN job;`);
  const insert = db.prepare(`INSERT INTO jobs (queue, id, payload, due_ms, token, attempts, seq) VALUES ('webhooks.deliver', ?, ?, ?, ?, ?, ?)`);
  insert.run('dlv_1', JSON.stringify({ deliveryId: 'dlv_1', trigger: 'resend' }), now - 1, null, 2, 1);
  // Leased by a worker that died: due when its lease ends.
  insert.run('dlv_2', JSON.stringify({ deliveryId: 'dlv_2' }), now + 60_000, 'tok', 1, 2);
  db.pragma('user_version = 3');
  db.close();

  const second = EmbeddedStore.open({ dataDir, now: () => now });
  t.teardown(() => second.close());
  t.same(await second.queue.stats('webhooks.deliver'), { ready: 0, delayed: 0, leased: 0 }, 'no job rows left');
  t.same(await second.webhooks.deliveryQueueStats(), { ready: 1, delayed: 0, leased: 1 }, 'the finished delivery is not queued');
  const [leased] = await second.webhooks.leaseDeliveries(5, 1000);
  t.same(
    [leased?.delivery.id, leased?.job.attempts, leased?.job.payload],
    ['dlv_1', 3, { deliveryId: 'dlv_1', trigger: 'resend' }],
    'the due job became a queued delivery with its lease count and payload',
  );
});
