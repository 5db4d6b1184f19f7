/**
 * kill -9 in the middle of a stream of committed multi-record writes, then reopen: everything
 * acknowledged is there, and no transaction is half there (a song without its usage count or
 * render job, a job without its record).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import t from 'tap';
import type { Test as Tap } from 'tap';
import { EmbeddedStore } from '../../store/EmbeddedStore.ts';
import { RedisStore } from '../../store/RedisStore.ts';
import type { SongRecord, WebhookDeliveryRecord } from '../../store/records.ts';
import type { Store } from '../../store/Store.ts';
import { startRedis } from '../helpers/redis.ts';

const WRITER = path.join(import.meta.dirname, 'fixtures', 'crash-writer.ts');
/** Kill after this many acknowledged transactions: enough to be mid-stream, quick to check. */
const KILL_AFTER = 400;

/** Runs the writer, SIGKILLs it after KILL_AFTER acks, returns every id it acknowledged. */
async function writeThenKill(args: string[]): Promise<{ songs: string[]; deliveries: string[]; signal: string | null }> {
  const child = spawn(process.execPath, ['--import', 'tsx', WRITER, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  const exit = new Promise<string | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
  const songs: string[] = [];
  const deliveries: string[] = [];
  let acks = 0;
  for await (const line of createInterface({ input: child.stdout })) {
    const [what, ...ids] = line.split(' ');
    if (what === 'song') songs.push(...ids);
    else if (what === 'deliveries') deliveries.push(...ids);
    if (++acks === KILL_AFTER) child.kill('SIGKILL');
  }
  const signal = await exit;
  if (signal !== 'SIGKILL') throw new Error(`writer ended on its own (acks ${acks}):\n${stderr}`);
  return { songs, deliveries, signal };
}

async function allSongs(store: Store): Promise<SongRecord[]> {
  const out: SongRecord[] = [];
  let cursor: string | null = null;
  do {
    const page = await store.songs.list('acc_crash', { limit: 100, cursor });
    out.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}

async function allDeliveries(store: Store): Promise<WebhookDeliveryRecord[]> {
  const out: WebhookDeliveryRecord[] = [];
  let cursor: string | null = null;
  do {
    const page = await store.webhooks.listDeliveries('whk_crash', {}, { limit: 100, cursor });
    out.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}

async function leaseIds(store: Store, queue: string): Promise<string[]> {
  const ids: string[] = [];
  for (let job = await store.queue.lease(queue, 60_000); job; job = await store.queue.lease(queue, 60_000)) ids.push(job.id);
  return ids;
}

async function checkSurvivors(t: Tap, store: Store, acked: { songs: string[]; deliveries: string[] }): Promise<void> {
  const songs = await allSongs(store);
  const songIds = new Set(songs.map((s) => s.id));
  t.ok(acked.songs.length > 0, `${acked.songs.length} songs acknowledged before the kill`);
  t.same(acked.songs.filter((id) => !songIds.has(id)), [], 'every acknowledged song survived');
  t.ok(songs.length - acked.songs.length <= 1, 'at most the one unacknowledged in-flight song extra');
  t.equal(await store.songs.used('acc_crash', '2023-11'), songs.length, 'usage counts every song, no more');
  t.equal(await store.songs.active('acc_crash'), songs.length, 'every song is active (queued)');
  const renderJobs = await leaseIds(store, 'render');
  t.same(renderJobs.sort(), [...songIds].sort(), 'exactly one render job per song, none without its song');

  const deliveries = await allDeliveries(store);
  const deliveryIds = new Set(deliveries.map((d) => d.id));
  t.same(acked.deliveries.filter((id) => !deliveryIds.has(id)), [], 'every acknowledged delivery survived');
  t.equal(deliveries.length % 2, 0, 'deliveries come in whole batches');
  const queued: string[] = [];
  for (let leased = await store.webhooks.leaseDeliveries(100, 60_000); leased.length > 0; leased = await store.webhooks.leaseDeliveries(100, 60_000)) {
    queued.push(...leased.map((l) => l.delivery.id));
  }
  t.same(queued.sort(), [...deliveryIds].sort(), 'every delivery is queued once (it is its own queue entry)');
}



void t.test('embedded: kill -9 mid-stream loses nothing committed and leaves nothing half-written', { timeout: 60_000 }, async (t) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'rv-crash-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const acked = await writeThenKill(['embedded', dataDir]);
  const store = EmbeddedStore.open({ dataDir });
  t.teardown(() => store.close());
  await checkSurvivors(t, store, acked);
});

void t.test('redis: kill -9 of the writer, then of redis-server (appendfsync always), loses nothing committed', { timeout: 60_000 }, async (t) => {
  const redis = await startRedis(t, { appendonly: true, appendfsync: 'always' });
  const acked = await writeThenKill(['redis', redis.url, 'crash:']);
  await redis.stop({ signal: 'SIGKILL' });
  await redis.restart();
  const store = await RedisStore.open({ url: redis.url, prefix: 'crash:' });
  t.teardown(() => store.close());
  await checkSurvivors(t, store, acked);
});
