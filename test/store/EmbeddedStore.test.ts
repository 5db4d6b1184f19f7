import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { EmbeddedStore } from '../../store/EmbeddedStore.ts';
import { runContract, song } from './contract.ts';

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
