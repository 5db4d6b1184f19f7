/**
 * The one contract both stores pass (store/Store.ts). Each case gets a fresh store from
 * `makeStore` with a fake clock, so leases, delays and rate-limit windows move without waiting.
 *
 *   runContract(t, 'embedded', ({ now }) => Promise.resolve(EmbeddedStore.open({ dataDir, now })));
 */
import type { Test } from 'tap';
import { DEFAULT_PARAMS } from '../../native/params/index.ts';
import type { SongRecord, StreamRecord, WebhookDeliveryRecord, WebhookEndpointRecord } from '../../store/records.ts';
import type { LeasedJob, SongCreateRules, Store } from '../../store/Store.ts';

export type MakeStore = (opts: { now: () => number }) => Promise<Store>;

/** 2023-11-14T22:13:20.000Z: a round start so times in tests read easily. */
export const T0 = 1_700_000_000_000;

export class FakeClock {
  ms = T0;
  readonly now = (): number => this.ms;
  advance(ms: number): void {
    this.ms += ms;
  }
}

const iso = (ms: number): string => new Date(ms).toISOString();

export function song(id: string, accountId: string, createdMs: number, over: Partial<SongRecord> = {}): SongRecord {
  return {
    id,
    accountId,
    status: 'queued',
    prompt: 'lofi beat with rain',
    duration: 30,
    bpm: 90,
    key: null,
    loop: false,
    seed: 4242,
    variations: 2,
    createdAt: iso(createdMs),
    startedAt: null,
    finishedAt: null,
    error: null,
    takes: [],
    progress: 0,
    usageMonth: '2023-11',
    attempts: 0,
    plan: { genre: 'lofi', sections: [], tempo: 0.123456789012345 },
    ...over,
  };
}

function stream(id: string, accountId: string, createdMs: number, over: Partial<StreamRecord> = {}): StreamRecord {
  return {
    id,
    accountId,
    name: `stream ${id}`,
    pipeline: 'streamdiffusion',
    params: { ...DEFAULT_PARAMS, prompt: 'a cat', t_index_list: [], seed: 2 },
    streamKey: `key_${id}`,
    playbackId: `pb_${id}`,
    outputRtmpUrl: null,
    fromPlayground: false,
    isSmokeTest: false,
    gatewayHost: 'localhost',
    nodeId: null,
    state: 'created',
    createdAt: iso(createdMs),
    updatedAt: iso(createdMs),
    startedAt: null,
    endedAt: null,
    endReason: null,
    lastLiveAt: null,
    deleted: false,
    ...over,
  };
}

function endpoint(id: string, accountId: string, createdMs: number): WebhookEndpointRecord {
  return {
    id,
    accountId,
    url: `https://example.com/hooks/${id}`,
    events: ['stream.started', 'stream.ended'],
    name: '',
    secret: `whsec_${id}`,
    isActive: true,
    consecutiveFailures: 0,
    createdAt: iso(createdMs),
    updatedAt: iso(createdMs),
  };
}

export function delivery(id: string, endpointId: string, eventId: string, createdMs: number, over: Partial<WebhookDeliveryRecord> = {}): WebhookDeliveryRecord {
  return {
    id,
    endpointId,
    accountId: 'acc_a',
    eventId,
    eventType: 'stream.started',
    streamId: 'str_1',
    payload: JSON.stringify({ id: eventId, type: 'stream.started' }),
    status: 'pending',
    attempts: 0,
    responseStatus: null,
    responseBody: null,
    error: null,
    createdAt: iso(createdMs),
    updatedAt: iso(createdMs),
    lastAttemptAt: null,
    nextAttemptAt: null,
    ...over,
  };
}

const rules = (over: Partial<SongCreateRules> = {}): SongCreateRules => ({
  month: '2023-11',
  monthlyLimit: 10,
  maxActive: 100,
  ...over,
});

/** Drains a queue: every job currently due, in lease order. */
/** Leases every due delivery of the deliveries queue (their leases, in lease order). */
async function leaseDeliveries(store: Store, max = 100): Promise<LeasedJob[]> {
  return (await store.webhooks.leaseDeliveries(max, 60_000)).map((l) => l.job);
}

async function leaseAll(store: Store, queue: string): Promise<LeasedJob[]> {
  const out: LeasedJob[] = [];
  for (let job = await store.queue.lease(queue, 60_000); job; job = await store.queue.lease(queue, 60_000)) out.push(job);
  return out;
}

interface Case {
  store: Store;
  clock: FakeClock;
}

export function runContract(t: Test, name: string, makeStore: MakeStore): void {
  const test = (title: string, fn: (t: Test, c: Case) => Promise<void>): void => {
    void t.test(`${name}: ${title}`, { timeout: 20_000 }, async (t) => {
      const clock = new FakeClock();
      const store = await makeStore({ now: clock.now });
      t.teardown(() => store.close());
      await fn(t, { store, clock });
    });
  };

  // ───────────────────────────── accounts

  test('accounts and API keys round-trip; a taken id or digest is a conflict', async (t, { store }) => {
    t.equal(await store.accounts.count(), 0);
    const account = { id: 'acc_a', plan: 'free' as const, name: 'Ada', createdAt: iso(T0) };
    await store.accounts.create(account);
    await store.accounts.create({ ...account, id: 'acc_b' });
    t.same(await store.accounts.get('acc_a'), account);
    t.equal(await store.accounts.get('acc_missing'), null);
    t.equal(await store.accounts.count(), 2);
    await t.rejects(store.accounts.create(account), { name: 'StoreError', code: 'conflict' });
    await store.accounts.setPlan('acc_a', 'pro');
    t.equal((await store.accounts.get('acc_a'))?.plan, 'pro');
    await store.accounts.setPlan('acc_missing', 'pro');
    t.equal(await store.accounts.get('acc_missing'), null, 'setPlan on a missing account creates nothing');

    const rule = { type: 'hook' as const, url: 'https://hooks.example.com/admit', actions: ['read' as const] };
    await store.accounts.setAdmission('acc_a', rule);
    t.same((await store.accounts.get('acc_a'))?.admission, rule, 'an admission rule round-trips');
    t.equal((await store.accounts.get('acc_a'))?.plan, 'pro', 'and leaves the plan as it was');
    await store.accounts.setAdmission('acc_a', null);
    t.equal((await store.accounts.get('acc_a'))?.admission, null, 'null removes it');
    await store.accounts.setAdmission('acc_missing', rule);
    t.equal(await store.accounts.get('acc_missing'), null, 'setAdmission on a missing account creates nothing');

    const key = { digest: 'ab'.repeat(32), accountId: 'acc_a', preview: 'rv_live_ab12', createdAt: iso(T0) };
    await store.accounts.addKey(key);
    t.same(await store.accounts.findKey(key.digest), key);
    t.equal(await store.accounts.findKey('cd'.repeat(32)), null);
    await t.rejects(store.accounts.addKey(key), { name: 'StoreError', code: 'conflict' });
  });

  // ───────────────────────────── songs

  test('songs.create counts usage, writes its jobs, and refuses with quota once the month is used', async (t, { store }) => {
    const r = rules({ monthlyLimit: 2 });
    const first = await store.songs.create(song('sng_1', 'acc_a', T0), r, {
      jobs: [{ queue: 'render', id: 'sng_1', payload: { songId: 'sng_1' } }],
    });
    t.match(first, { ok: true, position: 1, song: { id: 'sng_1', status: 'queued' } });
    t.same(await store.songs.get('sng_1'), song('sng_1', 'acc_a', T0));
    t.equal((await store.songs.create(song('sng_2', 'acc_a', T0 + 1), r)).ok, true);
    t.equal(await store.songs.used('acc_a', '2023-11'), 2);

    const refused = await store.songs.create(song('sng_3', 'acc_a', T0 + 2), r, {
      jobs: [{ queue: 'render', id: 'sng_3', payload: { songId: 'sng_3' } }],
    });
    t.same(refused, { ok: false, reason: 'quota', used: 2, limit: 2 });
    t.equal(await store.songs.get('sng_3'), null, 'a refused song is not stored');
    t.equal(await store.songs.used('acc_a', '2023-11'), 2, 'a refused song is not counted');
    t.equal(await store.songs.used('acc_a', '2023-12'), 0, 'months count apart');
    t.same(
      (await leaseAll(store, 'render')).map((j) => j.payload),
      [{ songId: 'sng_1' }],
      'only the accepted song with effects has a render job',
    );
    t.equal((await store.songs.create(song('sng_4', 'acc_b', T0 + 3), r)).ok, true, 'accounts count apart');
  });

  test('songs.create with a null monthly limit is unlimited', async (t, { store }) => {
    for (let i = 0; i < 12; i++) {
      const result = await store.songs.create(song(`sng_${i}`, 'acc_a', T0 + i), rules({ monthlyLimit: null }));
      t.equal(result.ok, true);
    }
    t.equal(await store.songs.used('acc_a', '2023-11'), 12);
  });

  test('songs.create refuses with busy at maxActive, and quota wins when both apply', async (t, { store }) => {
    const r = rules({ maxActive: 2, monthlyLimit: 3 });
    t.equal((await store.songs.create(song('sng_1', 'acc_a', T0), r)).ok, true);
    t.equal((await store.songs.create(song('sng_2', 'acc_a', T0 + 1), r)).ok, true);
    t.equal(await store.songs.active('acc_a'), 2);
    t.same(await store.songs.create(song('sng_3', 'acc_a', T0 + 2), r), { ok: false, reason: 'busy', active: 2 });
    await store.songs.update('sng_1', { status: 'rendering' });
    t.equal(await store.songs.active('acc_a'), 2, 'rendering still counts as active');
    await store.songs.update('sng_1', { status: 'done' });
    t.equal(await store.songs.active('acc_a'), 1);
    t.equal((await store.songs.create(song('sng_3', 'acc_a', T0 + 2), r)).ok, true);
    t.same(await store.songs.create(song('sng_4', 'acc_a', T0 + 3), r), { ok: false, reason: 'quota', used: 3, limit: 3 });
  });

  test('20 concurrent songs.create with a limit of 5 accept exactly 5', async (t, { store }) => {
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        store.songs.create(song(`sng_${i}`, 'acc_a', T0 + i), rules({ monthlyLimit: 5 }), {
          jobs: [{ queue: 'render', id: `sng_${i}`, payload: i }],
        }),
      ),
    );
    t.equal(results.filter((r) => r.ok).length, 5);
    t.equal(await store.songs.used('acc_a', '2023-11'), 5);
    t.equal((await store.queue.stats('render')).ready, 5, 'one job per accepted song');
    t.same(
      results.filter((r) => r.ok).map((r) => (r.ok ? r.position : 0)).sort((a, b) => a - b),
      [1, 2, 3, 4, 5],
      'each accepted song got its own place in line',
    );

    const busy = await Promise.all(
      Array.from({ length: 20 }, (_, i) => store.songs.create(song(`sng_b${i}`, 'acc_b', T0 + i), rules({ maxActive: 3, monthlyLimit: null }))),
    );
    t.equal(busy.filter((r) => r.ok).length, 3, 'maxActive holds under concurrency too');
    t.equal(await store.songs.active('acc_b'), 3);
  });

  test('songs.position is the global FIFO place among queued songs, null once not queued', async (t, { store }) => {
    const r = rules();
    const a1 = await store.songs.create(song('sng_a1', 'acc_a', T0), r);
    const b1 = await store.songs.create(song('sng_b1', 'acc_b', T0 + 1), r);
    const a2 = await store.songs.create(song('sng_a2', 'acc_a', T0 + 2), r);
    t.same([a1, b1, a2].map((x) => (x.ok ? x.position : 0)), [1, 2, 3]);
    t.equal(await store.songs.position('sng_b1'), 2);
    await store.songs.update('sng_a1', { status: 'rendering', startedAt: iso(T0 + 5) });
    t.equal(await store.songs.position('sng_a1'), null, 'rendering has no position');
    t.equal(await store.songs.position('sng_b1'), 1);
    t.equal(await store.songs.position('sng_a2'), 2);
    await store.songs.fail('sng_b1', { error: 'render_failed', message: 'boom' }, iso(T0 + 6));
    t.equal(await store.songs.position('sng_b1'), null);
    t.equal(await store.songs.position('sng_a2'), 1);
    t.equal(await store.songs.position('sng_missing'), null);
    const a3 = await store.songs.create(song('sng_a3', 'acc_a', T0 + 3), r);
    t.equal(a3.ok && a3.position, 2, 'a new song goes to the back of the line');
  });

  test('songs.fail gives the month back exactly once and keeps the first failure', async (t, { store }) => {
    await store.songs.create(song('sng_1', 'acc_a', T0, { usageMonth: '2023-11' }), rules());
    await store.songs.create(song('sng_2', 'acc_a', T0 + 1), rules());
    t.equal(await store.songs.used('acc_a', '2023-11'), 2);
    const err = { error: 'render_failed', message: 'engine crashed' };
    const failed = await store.songs.fail('sng_1', err, iso(T0 + 10));
    t.match(failed, { id: 'sng_1', status: 'failed', error: err, finishedAt: iso(T0 + 10) });
    t.equal(await store.songs.used('acc_a', '2023-11'), 1);
    t.equal(await store.songs.active('acc_a'), 1);
    const again = await store.songs.fail('sng_1', { error: 'other', message: 'second' }, iso(T0 + 20));
    t.same(again, failed, 'a failed song is left as is');
    t.equal(await store.songs.used('acc_a', '2023-11'), 1, 'nothing given back twice');
    const both = await Promise.all([
      store.songs.fail('sng_2', err, iso(T0 + 30)),
      store.songs.fail('sng_2', err, iso(T0 + 31)),
    ]);
    t.equal(both.filter((s) => s?.status === 'failed').length, 2);
    t.equal(await store.songs.used('acc_a', '2023-11'), 0, 'concurrent fails give back once');
    t.equal(await store.songs.fail('sng_missing', err, iso(T0)), null);
  });

  test('songs.update merges the patch and keeps JSON values exact', async (t, { store }) => {
    await store.songs.create(song('sng_1', 'acc_a', T0), rules());
    const takes = [
      { n: 1 as const, seed: 4242, duration: 29.5, waveform: [0, 0.5, 1, 0.333333333333333], mp3Key: 'songs/sng_1/1.mp3', wavKey: 'songs/sng_1/1.wav' },
    ];
    const updated = await store.songs.update('sng_1', { status: 'done', takes, progress: 1, finishedAt: iso(T0 + 9) });
    t.same(updated, { ...song('sng_1', 'acc_a', T0), status: 'done', takes, progress: 1, finishedAt: iso(T0 + 9) });
    t.same(await store.songs.get('sng_1'), updated);
    t.same((await store.songs.get('sng_1'))?.plan, { genre: 'lofi', sections: [], tempo: 0.123456789012345 }, 'empty arrays and long floats survive');
    t.equal(await store.songs.update('sng_missing', { progress: 0.5 }), null);
    await t.rejects(
      // @ts-expect-error createdAt orders lists and cannot change
      store.songs.update('sng_1', { createdAt: iso(T0 + 1) }),
      { name: 'StoreError', code: 'invalid_argument' },
    );
    await t.rejects(store.songs.create(song('sng_1', 'acc_a', T0), rules()), { name: 'StoreError', code: 'conflict' });
  });

  test('songs.list pages the account newest first with opaque cursors', async (t, { store }) => {
    for (let i = 0; i < 7; i++) await store.songs.create(song(`sng_${i}`, 'acc_a', T0 + i * 1000), rules({ monthlyLimit: null }));
    await store.songs.create(song('sng_other', 'acc_b', T0 + 500), rules());
    const seen: string[] = [];
    let cursor: string | null = null;
    const sizes: number[] = [];
    do {
      const page = await store.songs.list('acc_a', { limit: 3, cursor });
      sizes.push(page.items.length);
      seen.push(...page.items.map((s) => s.id));
      cursor = page.nextCursor;
    } while (cursor);
    t.same(sizes, [3, 3, 1]);
    t.same(seen, ['sng_6', 'sng_5', 'sng_4', 'sng_3', 'sng_2', 'sng_1', 'sng_0']);
    const exact = await store.songs.list('acc_a', { limit: 7 });
    t.equal(exact.items.length, 7);
    t.equal(exact.nextCursor, null, 'no cursor when the page ends the list');
    t.same((await store.songs.list('acc_none', { limit: 10 })).items, []);
    await t.rejects(store.songs.list('acc_a', { limit: 3, cursor: 'not-a-cursor' }), { name: 'StoreError', code: 'invalid_cursor' });
  });

  // ───────────────────────────── streams

  test('ids of any other shape name no record, even where they spell another record key', async (t, { store }) => {
    const s1 = stream('str_1', 'acc_a', T0);
    await store.streams.create(s1);
    // `str:bykey:key_str_1` is the stream-key index entry in Redis: an id must never reach it.
    for (const id of ['bykey:key_str_1', 'str_1:x', 'str_1/../str_1', 'str_', 'sng_1', `str_${'a'.repeat(65)}`, 'str_1\n', '']) {
      t.equal(await store.streams.get(id), null, `stream ${JSON.stringify(id)}`);
    }
    t.equal(await store.songs.get('str_1'), null, 'a stream id is no song id');
    t.equal(await store.songs.get('acct:acc_a'), null);
    t.equal(await store.webhooks.getEndpoint('dlv:x'), null);
    t.same(await store.streams.get('str_1'), s1, 'the real id still is');
  });

  test('streams are found by id, stream key and playback id; unique values conflict', async (t, { store }) => {
    const s1 = stream('str_1', 'acc_a', T0);
    await store.streams.create(s1);
    t.same(await store.streams.get('str_1'), s1);
    t.same(await store.streams.getByKey('key_str_1'), s1);
    t.same(await store.streams.getByPlaybackId('pb_str_1'), s1);
    t.equal(await store.streams.get('str_x'), null);
    t.equal(await store.streams.getByKey('key_x'), null);
    t.equal(await store.streams.getByPlaybackId('pb_x'), null);
    await t.rejects(store.streams.create(stream('str_2', 'acc_a', T0, { streamKey: 'key_str_1' })), { name: 'StoreError', code: 'conflict' });
    await t.rejects(store.streams.create(stream('str_2', 'acc_a', T0, { playbackId: 'pb_str_1' })), { name: 'StoreError', code: 'conflict' });
    t.equal(await store.streams.get('str_2'), null, 'a refused create leaves nothing behind');
    t.equal(await store.streams.getByKey('key_str_2'), null);

    await store.streams.create(stream('str_2', 'acc_a', T0 + 1));
    const moved = await store.streams.update('str_2', { streamKey: 'key_new' });
    t.equal(moved?.streamKey, 'key_new');
    t.equal((await store.streams.getByKey('key_new'))?.id, 'str_2');
    t.equal(await store.streams.getByKey('key_str_2'), null, 'the old key is released');
    await t.rejects(store.streams.update('str_2', { playbackId: 'pb_str_1' }), { name: 'StoreError', code: 'conflict' });
    t.equal((await store.streams.get('str_2'))?.playbackId, 'pb_str_2', 'a refused update changes nothing');
  });

  test('streams.list pages newest first without deleted streams; listByState finds by state', async (t, { store }) => {
    for (let i = 0; i < 5; i++) await store.streams.create(stream(`str_${i}`, 'acc_a', T0 + i));
    await store.streams.create(stream('str_b', 'acc_b', T0 + 9));
    await store.streams.update('str_3', { deleted: true, state: 'ended', endReason: 'deleted' });
    const first = await store.streams.list('acc_a', { limit: 2 });
    t.same(first.items.map((s) => s.id), ['str_4', 'str_2']);
    t.ok(first.nextCursor);
    const second = await store.streams.list('acc_a', { limit: 2, cursor: first.nextCursor });
    t.same(second.items.map((s) => s.id), ['str_1', 'str_0']);
    t.equal(second.nextCursor, null);

    await store.streams.update('str_1', { state: 'started' });
    await store.streams.update('str_b', { state: 'started' });
    t.same((await store.streams.listByState(['started'])).map((s) => s.id).sort(), ['str_1', 'str_b']);
    t.same((await store.streams.listByState(['ended'])).map((s) => s.id), ['str_3']);
    t.same((await store.streams.listByState(['created', 'ended'])).map((s) => s.id).sort(), ['str_0', 'str_2', 'str_3', 'str_4']);
    t.same(await store.streams.listByState([]), []);
  });

  test('streams.update is a compare-and-set on state that writes its effects with it', async (t, { store }) => {
    await store.streams.create(stream('str_1', 'acc_a', T0));
    const event = (n: number): { queue: string; id: string; payload: unknown } => ({ queue: 'events', id: `evt_${n}`, payload: { n } });
    t.equal(await store.streams.update('str_1', { state: 'ended' }, { fromStates: ['started'], effects: { jobs: [event(0)] } }), null);
    t.equal((await store.streams.get('str_1'))?.state, 'created', 'refused: state unchanged');
    t.equal((await store.queue.stats('events')).ready, 0, 'refused: no effects');

    const started = await store.streams.update('str_1', { state: 'started', startedAt: iso(T0 + 1) }, { fromStates: ['created', 'ended'], effects: { jobs: [event(1)] } });
    t.match(started, { state: 'started', startedAt: iso(T0 + 1), name: 'stream str_1' });

    const outcomes = await Promise.all(
      [2, 3, 4, 5].map((n) =>
        store.streams.update('str_1', { state: 'ended', endReason: 'timeout', endedAt: iso(T0 + n) }, { fromStates: ['started'], effects: { jobs: [event(n)] } }),
      ),
    );
    t.equal(outcomes.filter((o) => o !== null).length, 1, 'exactly one concurrent transition wins');
    const jobs = await leaseAll(store, 'events');
    t.equal(jobs.length, 2, 'one event for the start, one for the winning end');
    t.equal(jobs[0]?.id, 'evt_1');
    t.equal(await store.streams.update('str_x', { name: 'x' }), null, 'missing stream');
    t.equal((await store.streams.update('str_1', { name: 'renamed' }))?.name, 'renamed', 'no fromStates: any state');
    t.equal(await store.streams.update('str_1', { name: 'never' }, { fromStates: [] }), null, 'empty fromStates: no state');
  });

  // ───────────────────────────── webhooks

  test('webhooks.createEndpoint caps endpoints per account, also under concurrency', async (t, { store }) => {
    const results = await Promise.all(
      Array.from({ length: 15 }, (_, i) => store.webhooks.createEndpoint(endpoint(`whk_${String(i).padStart(2, '0')}`, 'acc_a', T0 + i), 10)),
    );
    t.equal(results.filter(Boolean).length, 10);
    const listed = await store.webhooks.listEndpoints('acc_a');
    t.equal(listed.length, 10);
    t.same(
      listed.map((e) => e.createdAt),
      [...listed.map((e) => e.createdAt)].sort(),
      'oldest first',
    );
    t.equal(await store.webhooks.createEndpoint(endpoint('whk_b', 'acc_b', T0), 10), true, 'other accounts are not capped by it');
    t.same(await store.webhooks.getEndpoint('whk_b'), endpoint('whk_b', 'acc_b', T0));
    t.equal(await store.webhooks.getEndpoint('whk_x'), null);
    const kept = listed[0] as WebhookEndpointRecord;
    t.equal(await store.webhooks.deleteEndpoint(kept.id), true);
    t.equal(await store.webhooks.deleteEndpoint(kept.id), false);
    t.equal(await store.webhooks.createEndpoint(endpoint('whk_new', 'acc_a', T0 + 99), 10), true, 'deleting frees a place');
    t.same(await store.webhooks.listEndpoints('acc_none'), []);
  });

  test('webhooks.recordOutcome resets on success and disables at the threshold', async (t, { store }) => {
    await store.webhooks.createEndpoint(endpoint('whk_1', 'acc_a', T0), 10);
    t.match(await store.webhooks.recordOutcome('whk_1', false, 3), { consecutiveFailures: 1, isActive: true });
    t.match(await store.webhooks.recordOutcome('whk_1', true, 3), { consecutiveFailures: 0, isActive: true });
    await Promise.all([1, 2].map(() => store.webhooks.recordOutcome('whk_1', false, 3)));
    t.match(await store.webhooks.getEndpoint('whk_1'), { consecutiveFailures: 2, isActive: true }, 'concurrent outcomes both count');
    t.match(await store.webhooks.recordOutcome('whk_1', false, 3), { consecutiveFailures: 3, isActive: false });
    t.match(await store.webhooks.recordOutcome('whk_1', true, 3), { consecutiveFailures: 0, isActive: false }, 'success does not re-enable');
    const enabled = await store.webhooks.updateEndpoint('whk_1', { isActive: true, url: 'https://example.com/v2', updatedAt: iso(T0 + 1) });
    t.match(enabled, { isActive: true, url: 'https://example.com/v2', updatedAt: iso(T0 + 1), secret: 'whsec_whk_1' });
    t.same(await store.webhooks.getEndpoint('whk_1'), enabled);
    t.equal(await store.webhooks.recordOutcome('whk_x', true, 3), null);
    t.equal(await store.webhooks.updateEndpoint('whk_x', { name: 'x' }), null);
  });

  test('webhooks.createDeliveries is idempotent on (eventId, endpointId), queue entries included', async (t, { store }) => {
    const first = await store.webhooks.createDeliveries([delivery('dlv_1', 'whk_1', 'evt_1', T0), delivery('dlv_2', 'whk_2', 'evt_1', T0)]);
    t.same(first.map((d) => d.id), ['dlv_1', 'dlv_2']);
    const again = await store.webhooks.createDeliveries([delivery('dlv_1b', 'whk_1', 'evt_1', T0 + 1), delivery('dlv_3', 'whk_1', 'evt_2', T0 + 1)]);
    t.same(again.map((d) => d.id), ['dlv_3'], 'the pair that exists is skipped');
    t.equal(await store.webhooks.getDelivery('dlv_1b'), null);
    t.same(await store.webhooks.getDelivery('dlv_1'), delivery('dlv_1', 'whk_1', 'evt_1', T0));
    t.same((await leaseDeliveries(store)).map((j) => j.id).sort(), ['dlv_1', 'dlv_2', 'dlv_3'], 'skipped pairs queue nothing');

    const racing = await Promise.all(
      [0, 1, 2].map((n) => store.webhooks.createDeliveries([delivery(`dlv_r${n}`, 'whk_1', 'evt_race', T0 + 2)])),
    );
    t.equal(racing.flat().length, 1, 'concurrent inserts of one pair keep one');
    t.same(await store.webhooks.createDeliveries([]), []);

    const updated = await store.webhooks.updateDelivery('dlv_1', { status: 'succeeded', attempts: 1, responseStatus: 200, responseBody: 'ok' });
    t.match(updated, { status: 'succeeded', attempts: 1, responseStatus: 200, eventId: 'evt_1' });
    t.same(await store.webhooks.getDelivery('dlv_1'), updated);
    t.equal(await store.webhooks.updateDelivery('dlv_x', { status: 'failed' }), null);
  });

  test('webhooks.createDeliveries acks the event job with the fan-out; findDelivery and settleDeliveries', async (t, { store, clock }) => {
    await store.queue.enqueue({ queue: 'events', id: 'evt_1', payload: 1 });
    const event = (await store.queue.lease('events', 1000)) as LeasedJob;
    await store.webhooks.createDeliveries(
      [delivery('dlv_1', 'whk_1', 'evt_1', T0), delivery('dlv_2', 'whk_2', 'evt_1', T0), delivery('dlv_3', 'whk_3', 'evt_1', T0)],
      { ack: event },
    );
    t.equal(await store.queue.has('events', 'evt_1'), false, 'the event job went with the fan-out');
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 3, delayed: 0, leased: 0 }, 'each delivery is queued as it is written');
    t.match(await store.webhooks.findDelivery('evt_1', 'whk_2'), { id: 'dlv_2' });
    t.equal(await store.webhooks.findDelivery('evt_1', 'whk_9'), null);
    t.equal(await store.webhooks.findDelivery('evt_9', 'whk_1'), null);

    const leased = await store.webhooks.leaseDeliveries(10, 1000);
    t.same(leased.map((l) => l.delivery), [delivery('dlv_1', 'whk_1', 'evt_1', T0), delivery('dlv_2', 'whk_2', 'evt_1', T0), delivery('dlv_3', 'whk_3', 'evt_1', T0)], 'the due deliveries, records included, in order');
    t.same(leased.map((l) => [l.job.queue, l.job.id, l.job.attempts, l.job.payload, l.job.leasedUntilMs]), [
      ['webhooks.deliver', 'dlv_1', 1, null, T0 + 1000],
      ['webhooks.deliver', 'dlv_2', 1, null, T0 + 1000],
      ['webhooks.deliver', 'dlv_3', 1, null, T0 + 1000],
    ]);
    const [a, b, c] = leased.map((l) => l.job);
    t.same(await store.webhooks.leaseDeliveries(10, 1000), [], 'none left');
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 3 });
    await store.webhooks.settleDeliveries([
      { deliveryId: 'dlv_1', patch: { status: 'succeeded', attempts: 1 }, job: a as LeasedJob },
      { deliveryId: 'dlv_2', patch: { attempts: 1, error: 'http_status: 500' }, job: b as LeasedJob, release: { atMs: T0 + 100, counted: true } },
      { deliveryId: 'dlv_3', patch: { nextAttemptAt: iso(T0 + 100) }, job: c as LeasedJob, release: { atMs: T0 + 100, counted: false, payload: { deliveryId: 'dlv_3', slot: 7 } } },
      { deliveryId: 'dlv_gone', patch: { attempts: 1 }, job: { ...(a as LeasedJob), id: 'dlv_gone' } },
    ]);
    t.match(await store.webhooks.getDelivery('dlv_1'), { status: 'succeeded', attempts: 1 });
    t.match(await store.webhooks.getDelivery('dlv_2'), { status: 'pending', error: 'http_status: 500' });
    t.equal(await store.webhooks.getDelivery('dlv_gone'), null, 'a missing delivery is not created');
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 2, leased: 0 }, 'the finished one left the queue');
    clock.advance(100);
    const again = await store.webhooks.leaseDeliveries(10, 1000);
    t.same(
      again.map((l) => [l.job.id, l.job.attempts, l.job.payload, l.delivery.attempts]),
      [
        ['dlv_2', 2, null, 1],
        ['dlv_3', 1, { deliveryId: 'dlv_3', slot: 7 }, 0],
      ],
      'a counted release counts the lease; a deferred one does not and takes the new payload',
    );
    const [d2] = again.map((l) => l.job) as [LeasedJob];
    await store.webhooks.settleDeliveries([{ deliveryId: 'dlv_2', patch: {}, job: d2, release: { atMs: T0 + 100, counted: false } }]);
    await store.webhooks.settleDeliveries([{ deliveryId: 'dlv_2', patch: { error: 'stale' }, job: d2 }]);
    t.match(await store.webhooks.getDelivery('dlv_2'), { error: 'stale' }, 'a stale lease still patches the record');
    t.match(
      (await store.webhooks.leaseDeliveries(1, 1000))[0]?.job,
      { id: 'dlv_2', attempts: 2, payload: null },
      'but leaves the queue state alone: the release without payload kept it, the stale finish did not take it out',
    );
  });

  test('webhooks.leaseDeliveries settles and leases in one call; an expired lease is leased again', async (t, { store, clock }) => {
    await store.webhooks.createDeliveries([
      delivery('dlv_1', 'whk_1', 'evt_1', T0),
      delivery('dlv_2', 'whk_1', 'evt_2', T0),
      delivery('dlv_3', 'whk_1', 'evt_3', T0, { nextAttemptAt: iso(T0 + 500) }),
      delivery('dlv_4', 'whk_1', 'evt_4', T0, { status: 'failed' }),
    ]);
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 2, delayed: 1, leased: 0 }, 'due at nextAttemptAt; a finished record is not queued');
    const [first] = await store.webhooks.leaseDeliveries(1, 1000);
    t.equal(first?.delivery.id, 'dlv_1');
    const cycle = await store.webhooks.leaseDeliveries(5, 1000, [
      { deliveryId: 'dlv_1', patch: { status: 'succeeded', attempts: 1 }, job: (first as { job: LeasedJob }).job },
    ]);
    t.same(cycle.map((l) => l.delivery.id), ['dlv_2'], 'the settle and the next lease in one call');
    t.match(await store.webhooks.getDelivery('dlv_1'), { status: 'succeeded', attempts: 1 });
    t.same(await store.webhooks.leaseDeliveries(0, 1000), [], 'max 0 leases nothing');
    clock.advance(1000);
    const after = await store.webhooks.leaseDeliveries(5, 1000);
    t.same(
      after.map((l) => [l.delivery.id, l.job.attempts]),
      [
        ['dlv_3', 1],
        ['dlv_2', 2],
      ],
      'dlv_3 became due at T0+500, dlv_2 when its lease ran out at T0+1000 (earliest first), counted again',
    );
    const old = (cycle[0] as { job: LeasedJob }).job;
    await store.webhooks.settleDeliveries([{ deliveryId: 'dlv_2', patch: {}, job: old }]);
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 2 }, "the expired lease's settle leaves the new lease alone");
    t.equal(await store.queue.has('webhooks.deliver', 'dlv_2'), false, 'no job row: the delivery is its own queue entry');
  });

  test('webhooks.createDeliveries fans out several events at once and acks every event job in the same call', async (t, { store, clock }) => {
    for (const id of ['evt_1', 'evt_2', 'evt_3', 'evt_4']) await store.queue.enqueue({ queue: 'events', id, payload: id });
    const [e1, e2, e3] = await store.queue.leaseMany('events', 3, 10_000);
    const e4 = await store.queue.lease('events', 1000);
    // evt_4's lease runs out and someone else leases it: its old lease must not ack the new one.
    clock.advance(1000);
    const e4again = (await store.queue.lease('events', 1000)) as LeasedJob;
    t.equal(e4again.id, 'evt_4');
    const created = await store.webhooks.createDeliveries(
      [delivery('dlv_1', 'whk_1', 'evt_1', T0), delivery('dlv_2', 'whk_2', 'evt_1', T0), delivery('dlv_3', 'whk_1', 'evt_2', T0)],
      { ack: [e1, e2, e3, e4] as LeasedJob[] },
    );
    t.same(created.map((d) => d.id), ['dlv_1', 'dlv_2', 'dlv_3']);
    t.same(
      await Promise.all(['evt_1', 'evt_2', 'evt_3', 'evt_4'].map((id) => store.queue.has('events', id))),
      [false, false, false, true],
      'every event job whose lease is ours is acked (evt_3 had no subscriber), a stale lease is left alone',
    );
    t.same((await leaseDeliveries(store)).map((j) => j.id).sort(), ['dlv_1', 'dlv_2', 'dlv_3']);
    t.equal(await store.queue.ack(e4again), true, 'the new lease of evt_4 is intact');

    await store.queue.enqueue({ queue: 'events', id: 'evt_5', payload: 5 });
    await store.queue.enqueue({ queue: 'events', id: 'evt_6', payload: 6 });
    const none = await store.queue.leaseMany('events', 2, 1000);
    t.same(await store.webhooks.createDeliveries([], { ack: none }), [], 'no deliveries: the acks alone');
    t.same(await store.queue.stats('events'), { ready: 0, delayed: 0, leased: 0 });
  });

  test('rateLimits.reserve hands out slots an interval apart, starting now when idle', async (t, { store, clock }) => {
    t.equal(await store.rateLimits.reserve('ep:1', 200), T0);
    t.equal(await store.rateLimits.reserve('ep:1', 200), T0 + 200);
    t.equal(await store.rateLimits.reserve('ep:1', 200), T0 + 400);
    t.equal(await store.rateLimits.reserve('ep:2', 200), T0, 'keys are apart');
    clock.advance(1000);
    t.equal(await store.rateLimits.reserve('ep:1', 200), T0 + 1000, 'idle again: the slot starts now, no saved-up burst');
    t.equal(await store.rateLimits.reserve('ep:1', 200), T0 + 1200);
  });

  test('webhooks.listDeliveries filters and pages newest first; deleteEndpoint and purge remove logs', async (t, { store }) => {
    await store.webhooks.createEndpoint(endpoint('whk_1', 'acc_a', T0), 10);
    const all: WebhookDeliveryRecord[] = [];
    for (let i = 0; i < 8; i++) {
      all.push(
        delivery(`dlv_${i}`, 'whk_1', `evt_${i}`, T0 + i * 1000, {
          status: i % 2 === 0 ? 'succeeded' : 'failed',
          eventType: i < 4 ? 'stream.started' : 'stream.ended',
          streamId: i % 3 === 0 ? 'str_x' : 'str_y',
        }),
      );
    }
    await store.webhooks.createDeliveries(all);
    await store.webhooks.createDeliveries([delivery('dlv_other', 'whk_2', 'evt_0', T0)]);

    const ids = async (filter: Parameters<Store['webhooks']['listDeliveries']>[1], limit: number): Promise<string[][]> => {
      const pages: string[][] = [];
      let cursor: string | null = null;
      do {
        const page = await store.webhooks.listDeliveries('whk_1', filter, { limit, cursor });
        pages.push(page.items.map((d) => d.id));
        cursor = page.nextCursor;
      } while (cursor);
      return pages;
    };
    t.same(await ids({}, 3), [['dlv_7', 'dlv_6', 'dlv_5'], ['dlv_4', 'dlv_3', 'dlv_2'], ['dlv_1', 'dlv_0']]);
    t.same(await ids({ status: 'failed' }, 2), [['dlv_7', 'dlv_5'], ['dlv_3', 'dlv_1']]);
    t.same(await ids({ eventType: 'stream.started', status: 'succeeded' }, 5), [['dlv_2', 'dlv_0']]);
    t.same(await ids({ streamId: 'str_x' }, 10), [['dlv_6', 'dlv_3', 'dlv_0']]);
    t.same(await ids({ status: 'pending' }, 10), [[]]);

    t.equal(await store.webhooks.purgeDeliveries(iso(T0 + 3000)), 4, 'created strictly before the cutoff, other endpoints included');
    t.same(await ids({}, 10), [['dlv_7', 'dlv_6', 'dlv_5', 'dlv_4', 'dlv_3']]);
    t.equal(await store.webhooks.getDelivery('dlv_other'), null);
    t.same(
      (await store.webhooks.createDeliveries([delivery('dlv_0b', 'whk_1', 'evt_0', T0 + 9000)])).map((d) => d.id),
      ['dlv_0b'],
      'a purged pair may be delivered again',
    );
    t.equal(await store.webhooks.deleteEndpoint('whk_1'), true);
    t.same((await store.webhooks.listDeliveries('whk_1', {}, { limit: 10 })).items, []);
    t.equal(await store.webhooks.getDelivery('dlv_7'), null, 'the endpoint took its delivery log with it');
    t.same(
      (await store.webhooks.createDeliveries([delivery('dlv_7b', 'whk_1', 'evt_7', T0)])).map((d) => d.id),
      ['dlv_7b'],
      'pairs of a deleted endpoint are free again',
    );
  });

  test('webhooks.listDeliveries windows by creation time, alone and with a cursor', async (t, { store }) => {
    await store.webhooks.createEndpoint(endpoint('whk_1', 'acc_a', T0), 10);
    const all = Array.from({ length: 6 }, (_, i) => delivery(`dlv_${i}`, 'whk_1', `evt_${i}`, T0 + i * 1000, { status: 'failed' }));
    // Two at the same ms as the window's start and end, so the bounds' inclusivity shows.
    all.push(delivery('dlv_2b', 'whk_1', 'evt_2b', T0 + 2000, { status: 'failed' }), delivery('dlv_5b', 'whk_1', 'evt_5b', T0 + 5000, { status: 'failed' }));
    await store.webhooks.createDeliveries(all);
    const window = { createdFrom: iso(T0 + 2000), createdBefore: iso(T0 + 5000) };
    const pages: string[][] = [];
    let cursor: string | null = null;
    do {
      const page = await store.webhooks.listDeliveries('whk_1', { ...window, status: 'failed' }, { limit: 2, cursor });
      pages.push(page.items.map((d) => d.id));
      cursor = page.nextCursor;
    } while (cursor);
    t.same(pages, [['dlv_4', 'dlv_3'], ['dlv_2b', 'dlv_2']], 'from is inclusive, before exclusive');
    t.same((await store.webhooks.listDeliveries('whk_1', { createdFrom: iso(T0 + 4500) }, { limit: 10 })).items.map((d) => d.id), ['dlv_5b', 'dlv_5']);
    t.same((await store.webhooks.listDeliveries('whk_1', { createdBefore: iso(T0 + 1000) }, { limit: 10 })).items.map((d) => d.id), ['dlv_0']);
  });

  test('webhooks.requeueDelivery moves a finished delivery back to pending and into the queue, once', async (t, { store, clock }) => {
    await store.webhooks.createEndpoint(endpoint('whk_1', 'acc_a', T0), 10);
    await store.webhooks.createDeliveries([delivery('dlv_1', 'whk_1', 'evt_1', T0, { status: 'failed', attempts: 8 })]);
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 0 });
    const queued = { payload: { deliveryId: 'dlv_1', trigger: 'resend' }, runAtMs: T0 + 10 };
    const racing = await Promise.all([0, 1, 2].map(() => store.webhooks.requeueDelivery('dlv_1', { status: 'pending', error: null }, queued)));
    const won = racing.filter((r) => r !== null);
    t.equal(won.length, 1, 'concurrent requeues of one delivery: one wins');
    t.match(won[0], { id: 'dlv_1', status: 'pending', attempts: 8, eventId: 'evt_1', error: null });
    t.same(await store.webhooks.getDelivery('dlv_1'), won[0]);
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 1, leased: 0 }, 'due at runAtMs');
    clock.advance(10);
    t.same((await leaseDeliveries(store)).map((j) => [j.id, j.payload, j.attempts]), [['dlv_1', queued.payload, 1]], 'queued once, with its payload and a fresh count');
    t.equal(await store.webhooks.requeueDelivery('dlv_1', { status: 'pending' }, queued), null, 'a pending delivery is left as is');
    t.equal(await store.webhooks.requeueDelivery('dlv_x', { status: 'pending' }, queued), null, 'a missing one too');
  });

  test('webhooks.addAttempt keeps the newest `keep` sends per delivery, oldest first; they go with the delivery', async (t, { store }) => {
    await store.webhooks.createEndpoint(endpoint('whk_1', 'acc_a', T0), 10);
    await store.webhooks.createDeliveries([delivery('dlv_1', 'whk_1', 'evt_1', T0), delivery('dlv_2', 'whk_1', 'evt_2', T0 + 5000)]);
    const attempt = (deliveryId: string, n: number) => ({
      deliveryId,
      attempt: n,
      trigger: n > 8 ? ('resend' as const) : ('scheduled' as const),
      startedAt: iso(T0 + n * 1000),
      durationMs: 12.5,
      responseStatus: n % 2 === 0 ? 503 : null,
      responseBody: n % 2 === 0 ? `down ${n} ü` : null,
      error: n % 2 === 0 ? 'http_status: 503' : 'timeout: no answer in 10000 ms',
    });
    for (let n = 1; n <= 12; n++) await store.webhooks.addAttempt(attempt('dlv_1', n), 10);
    await store.webhooks.addAttempt(attempt('dlv_2', 1), 10);
    const log = await store.webhooks.listAttempts('dlv_1');
    t.same(log.map((a) => a.attempt), [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 'the 10 newest, oldest first');
    t.same(log[1], attempt('dlv_1', 4), 'every field round-trips');
    t.same(await store.webhooks.listAttempts('dlv_x'), []);
    await store.webhooks.addAttempt(attempt('dlv_gone', 1), 10);
    t.same(await store.webhooks.listAttempts('dlv_gone'), [], 'no log for a delivery that does not exist');
    t.equal(await store.webhooks.purgeDeliveries(iso(T0 + 1)), 1);
    t.same(await store.webhooks.listAttempts('dlv_1'), [], 'purged with its delivery');
    t.equal((await store.webhooks.listAttempts('dlv_2')).length, 1);
    t.equal(await store.webhooks.deleteEndpoint('whk_1'), true);
    t.same(await store.webhooks.listAttempts('dlv_2'), [], 'deleted with its endpoint');
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 0 }, 'purged and deleted deliveries left the queue too');
  });

  test('webhooks.updateDelivery with a log entry updates and appends together, capped', async (t, { store }) => {
    await store.webhooks.createDeliveries([delivery('dlv_1', 'whk_1', 'evt_1', T0)]);
    const entry = (n: number) => ({ deliveryId: 'dlv_1', attempt: n, trigger: 'scheduled' as const, startedAt: iso(T0 + n), durationMs: n, responseStatus: 500, responseBody: 'no', error: 'http_status: 500' });
    for (let n = 1; n <= 4; n++) {
      const updated = await store.webhooks.updateDelivery('dlv_1', { attempts: n, responseStatus: 500 }, { attempt: entry(n), keep: 3 });
      t.match(updated, { id: 'dlv_1', attempts: n, responseStatus: 500 });
    }
    t.same(await store.webhooks.listAttempts('dlv_1'), [entry(2), entry(3), entry(4)], 'the newest 3, oldest first');
    t.equal(await store.webhooks.updateDelivery('dlv_x', { attempts: 1 }, { attempt: { ...entry(1), deliveryId: 'dlv_x' }, keep: 3 }), null);
    t.same(await store.webhooks.listAttempts('dlv_x'), [], 'nothing logged for a missing delivery');
  });

  test('webhooks.settleDeliveries appends each send to its attempts log with the outcome, capped', async (t, { store }) => {
    await store.webhooks.createDeliveries([delivery('dlv_1', 'whk_1', 'evt_1', T0), delivery('dlv_2', 'whk_1', 'evt_2', T0)]);
    const entry = (deliveryId: string, n: number) => ({
      deliveryId,
      attempt: n,
      trigger: n > 2 ? ('recover' as const) : ('scheduled' as const),
      startedAt: iso(T0 + n),
      durationMs: n,
      responseStatus: 500,
      responseBody: 'no',
      error: 'http_status: 500',
    });
    for (let n = 1; n <= 4; n++) {
      const jobs = await leaseDeliveries(store, 10);
      t.equal(jobs.length, 2);
      const a = jobs.find((j) => j.id === 'dlv_1') as LeasedJob;
      const b = jobs.find((j) => j.id === 'dlv_2') as LeasedJob;
      await store.webhooks.settleDeliveries([
        { deliveryId: 'dlv_1', patch: { attempts: n }, job: a, release: { atMs: 0, counted: true }, log: { attempt: entry('dlv_1', n), keep: 3 } },
        // A held-back lease: no send, no entry.
        { deliveryId: 'dlv_2', patch: { nextAttemptAt: iso(T0) }, job: b, release: { atMs: 0, counted: false } },
      ]);
    }
    t.match(await store.webhooks.getDelivery('dlv_1'), { attempts: 4 });
    t.same(await store.webhooks.listAttempts('dlv_1'), [entry('dlv_1', 2), entry('dlv_1', 3), entry('dlv_1', 4)], 'the newest 3, oldest first');
    t.same(await store.webhooks.listAttempts('dlv_2'), [], 'a deferral logs nothing');
    const [last] = (await leaseDeliveries(store, 1)) as [LeasedJob];
    await store.webhooks.settleDeliveries([
      { deliveryId: 'dlv_gone', patch: { attempts: 1 }, job: { ...last, id: 'dlv_gone' }, log: { attempt: entry('dlv_gone', 1), keep: 3 } },
      { deliveryId: last.id, patch: { status: 'succeeded', attempts: 9 }, job: last, log: { attempt: entry(last.id, 9), keep: 3 } },
    ]);
    t.same(await store.webhooks.listAttempts('dlv_gone'), [], 'nothing logged for a missing delivery');
    t.match(await store.webhooks.getDelivery(last.id), { status: 'succeeded', attempts: 9 });
    t.same((await store.webhooks.listAttempts(last.id)).at(-1), entry(last.id, 9), 'a final send is logged with its outcome');
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 1, delayed: 0, leased: 0 }, 'and it left the queue (the other is due)');
  });

  // ───────────────────────────── jobs

  test('queue.enqueue is idempotent while a job is queued or leased', async (t, { store }) => {
    t.equal(await store.queue.enqueue({ queue: 'q', id: 'j1', payload: { a: 1 } }), true);
    t.equal(await store.queue.enqueue({ queue: 'q', id: 'j1', payload: { a: 2 } }), false);
    t.equal(await store.queue.enqueue({ queue: 'other', id: 'j1', payload: null }), true, 'ids are per queue');
    const job = await store.queue.lease('q', 1000);
    t.same(job?.payload, { a: 1 }, 'the first payload wins');
    t.equal(await store.queue.enqueue({ queue: 'q', id: 'j1', payload: { a: 3 } }), false, 'leased');
    t.equal(await store.queue.ack(job as LeasedJob), true);
    t.equal(await store.queue.enqueue({ queue: 'q', id: 'j1', payload: { a: 4 } }), true, 'done: the id is free again');
    await t.rejects(store.queue.enqueue({ queue: 'bad:name', id: 'x', payload: 1 }), { name: 'StoreError', code: 'invalid_argument' });
  });

  test('queue leases due jobs by run time, FIFO among equals, never before due', async (t, { store, clock }) => {
    await store.queue.enqueue({ queue: 'q', id: 'late', payload: 'late', runAtMs: T0 + 1000 });
    for (const id of ['a', 'b', 'c']) await store.queue.enqueue({ queue: 'q', id, payload: id });
    await store.queue.enqueue({ queue: 'q', id: 'early', payload: 'early', runAtMs: T0 - 5 });
    t.same(await store.queue.stats('q'), { ready: 4, delayed: 1, leased: 0 });
    t.same((await leaseAll(store, 'q')).map((j) => j.id), ['early', 'a', 'b', 'c']);
    t.equal(await store.queue.lease('q', 1000), null, 'the delayed job is not due');
    clock.advance(999);
    t.equal(await store.queue.lease('q', 1000), null, '1 ms before due');
    clock.advance(1);
    const late = await store.queue.lease('q', 1000);
    t.match(late, { id: 'late', payload: 'late', attempts: 1, leasedUntilMs: T0 + 2000 });
    t.same(await store.queue.stats('q'), { ready: 0, delayed: 0, leased: 5 });
  });

  test('an expired lease is leased again with attempts + 1; the stale token can do nothing', async (t, { store, clock }) => {
    await store.queue.enqueue({ queue: 'q', id: 'j', payload: { x: [1, 2] } });
    const first = (await store.queue.lease('q', 1000)) as LeasedJob;
    t.match(first, { id: 'j', attempts: 1, leasedUntilMs: T0 + 1000 });
    t.equal(await store.queue.lease('q', 1000), null, 'leased jobs are not handed out twice');
    clock.advance(1000);
    t.same(await store.queue.stats('q'), { ready: 1, delayed: 0, leased: 0 }, 'an expired lease is ready');
    const second = (await store.queue.lease('q', 1000)) as LeasedJob;
    t.match(second, { id: 'j', attempts: 2, payload: { x: [1, 2] }, leasedUntilMs: T0 + 2000 });
    t.not(second.token, first.token);
    t.equal(await store.queue.ack(first), false, 'stale ack');
    t.equal(await store.queue.retry(first, T0), false, 'stale retry');
    t.equal(await store.queue.extend(first, 5000), false, 'stale extend');
    t.same(await store.queue.stats('q'), { ready: 0, delayed: 0, leased: 1 }, 'stale calls changed nothing');
    t.equal(await store.queue.ack(second), true);
    t.equal(await store.queue.ack(second), false, 'acked twice');
    t.same(await store.queue.stats('q'), { ready: 0, delayed: 0, leased: 0 });
  });

  test('queue.retry releases the job to run at a time; extend keeps the lease', async (t, { store, clock }) => {
    await store.queue.enqueue({ queue: 'q', id: 'j', payload: 1 });
    await store.queue.enqueue({ queue: 'q', id: 'k', payload: 2, runAtMs: T0 + 500 });
    const job = (await store.queue.lease('q', 1000)) as LeasedJob;
    t.equal(await store.queue.retry(job, T0 + 500), true);
    t.equal(await store.queue.retry(job, T0 + 500), false, 'a retried lease is no longer ours');
    t.same(await store.queue.stats('q'), { ready: 0, delayed: 2, leased: 0 });
    t.equal(await store.queue.lease('q', 1000), null);
    clock.advance(500);
    const order = await leaseAll(store, 'q');
    t.same(order.map((j) => [j.id, j.attempts]), [['k', 1], ['j', 2]], 'a retried job goes behind jobs already due at that time');

    await store.queue.enqueue({ queue: 'x', id: 'long', payload: null });
    const long = (await store.queue.lease('x', 1000)) as LeasedJob;
    clock.advance(900);
    t.equal(await store.queue.extend(long, 1000), true);
    clock.advance(900);
    t.equal(await store.queue.lease('x', 1000), null, 'extended: not expired at the old end');
    t.same(await store.queue.stats('x'), { ready: 0, delayed: 0, leased: 1 });
    t.equal(await store.queue.ack(long), true);
  });

  test('queue.waitForWork wakes on enqueue and retry well before its timeout, and times out otherwise', async (t, { store }) => {
    // The first wait may return at once (see JobQueue.waitForWork); workers loop the same way.
    await store.queue.waitForWork('w', 50);
    let started = performance.now();
    const waiting = store.queue.waitForWork('w', 5000);
    await store.queue.enqueue({ queue: 'w', id: 'j', payload: 1 });
    await waiting;
    t.ok(performance.now() - started < 2000, `woke on enqueue after ${Math.round(performance.now() - started)} ms`);

    const job = (await store.queue.lease('w', 1000)) as LeasedJob;
    started = performance.now();
    const again = store.queue.waitForWork('w', 5000);
    await store.queue.retry(job, 0);
    await again;
    t.ok(performance.now() - started < 2000, 'woke on retry');

    started = performance.now();
    await store.queue.waitForWork('w', 150);
    t.ok(performance.now() - started >= 140, 'times out without work');

    const controller = new AbortController();
    started = performance.now();
    const aborted = store.queue.waitForWork('w', 5000, controller.signal);
    controller.abort();
    await aborted;
    t.ok(performance.now() - started < 2000, 'abort ends the wait');
  });

  // ───────────────────────────── bus

  test('bus delivers copies to each subscriber of a channel until it unsubscribes', async (t, { store }) => {
    const gotA: unknown[] = [];
    const gotB: unknown[] = [];
    const other: unknown[] = [];
    let wake: () => void = () => undefined;
    const nextB = (): Promise<void> => new Promise((resolve) => (wake = resolve));
    const offA = await store.bus.subscribe('params', (m) => gotA.push(m));
    await store.bus.subscribe('params', (m) => {
      gotB.push(m);
      wake();
    });
    await store.bus.subscribe('other', (m) => other.push(m));

    const message = { prompt: 'a dog', nested: { list: [1, 2] } };
    let arrived = nextB();
    await store.bus.publish('params', message);
    await arrived;
    t.same(gotA, [message]);
    t.same(gotB, [message]);
    t.not(gotA[0], message, 'not the publisher’s object');
    t.not(gotA[0], gotB[0], 'each subscriber has its own copy');
    t.same(other, [], 'channels are apart');

    await offA();
    await offA();
    arrived = nextB();
    await store.bus.publish('params', 'second');
    await arrived;
    t.same(gotB, [message, 'second']);
    t.same(gotA, [message], 'unsubscribed handler got nothing more');
  });

  // ───────────────────────────── rate limits

  test('rateLimits is a sliding window: a burst across a window edge cannot double', async (t, { store, clock }) => {
    clock.ms = T0 + 900;
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await store.rateLimits.hit('ip:1', 3, 1000));
    t.same(results.map((r) => [r.allowed, r.remaining]), [[true, 2], [true, 1], [true, 0]]);
    t.match(await store.rateLimits.hit('ip:1', 3, 1000), { allowed: false, retryAfterMs: 1000 });
    clock.ms = T0 + 1100;
    t.same(await store.rateLimits.hit('ip:1', 3, 1000), { allowed: false, remaining: 0, retryAfterMs: 800 }, 'a fixed window would have reset here');
    t.match(await store.rateLimits.hit('ip:2', 3, 1000), { allowed: true, remaining: 2 }, 'keys count apart');
    clock.ms = T0 + 1899;
    t.match(await store.rateLimits.hit('ip:1', 3, 1000), { allowed: false, retryAfterMs: 1 });
    clock.ms = T0 + 1900;
    t.same(await store.rateLimits.hit('ip:1', 3, 1000), { allowed: true, remaining: 2, retryAfterMs: 0 }, 'the 3 hits at +900 left the window; refused hits did not count');
  });

  // ───────────────────────────── counters

  test('counters start at 0, add atomically under concurrency and keep names apart', async (t, { store }) => {
    t.equal(await store.counters.get('usage:acc_a:2026-03'), 0, 'never added → 0');
    t.equal(await store.counters.add('usage:acc_a:2026-03', 30), 30);
    const results = await Promise.all(Array.from({ length: 20 }, () => store.counters.add('usage:acc_a:2026-03', 5)));
    t.equal(await store.counters.get('usage:acc_a:2026-03'), 130, '20 concurrent adds of 5 all counted');
    t.equal(new Set(results).size, 20, 'each add saw its own new value');
    t.equal(await store.counters.add('usage:acc_a:2026-03', -10), 120, 'negative deltas subtract');
    t.equal(await store.counters.get('usage:acc_b:2026-03'), 0, 'other names untouched');
    await t.rejects(store.counters.add('x', 1.5), { code: 'invalid_argument' }, 'a fractional delta is refused');
  });

  // ───────────────────────────── node registry

  test('nodes: a beat registers or refreshes an entry; expired entries stay listed until removed', async (t, { store, clock }) => {
    t.same(await store.nodes.list('media'), [], 'empty at first');
    await store.nodes.beat('media', 'node-b', { publicUrl: 'http://b', capacity: 4, models: ['m1'] }, 3000);
    clock.advance(10);
    await store.nodes.beat('media', 'node-a', { publicUrl: 'http://a', capacity: 2, models: [] }, 3000);
    await store.nodes.beat('worker', 'w1', null, 3000);
    t.same(await store.nodes.list('media'), [
      { id: 'node-a', info: { publicUrl: 'http://a', capacity: 2, models: [] }, lastBeatMs: T0 + 10, expiresAtMs: T0 + 3010 },
      { id: 'node-b', info: { publicUrl: 'http://b', capacity: 4, models: ['m1'] }, lastBeatMs: T0, expiresAtMs: T0 + 3000 },
    ], 'ordered by id, info kept as JSON (empty arrays stay arrays)');
    t.same((await store.nodes.list('worker')).map((n) => n.id), ['w1'], 'kinds are apart');

    clock.advance(2000);
    await store.nodes.beat('media', 'node-b', { publicUrl: 'http://b', capacity: 4, models: ['m1'], load: 1 }, 3000);
    const b = (await store.nodes.list('media')).find((n) => n.id === 'node-b');
    t.same(b, { id: 'node-b', info: { publicUrl: 'http://b', capacity: 4, models: ['m1'], load: 1 }, lastBeatMs: T0 + 2010, expiresAtMs: T0 + 5010 }, 'a beat replaces info and moves the expiry');

    clock.advance(10_000);
    t.same((await store.nodes.list('media')).map((n) => n.id), ['node-a', 'node-b'], 'expired entries are still listed (a sweeper decides)');
    t.equal(await store.nodes.remove('media', 'node-a'), true);
    t.equal(await store.nodes.remove('media', 'node-a'), false, 'removing twice: false');
    t.same((await store.nodes.list('media')).map((n) => n.id), ['node-b']);
    await store.nodes.beat('media', 'node-a', {}, 1000);
    t.same((await store.nodes.list('media')).map((n) => n.id), ['node-a', 'node-b'], 'a later beat registers it again');
  });

  test('nodes: bad kinds, ids and ttls are refused', async (t, { store }) => {
    await t.rejects(store.nodes.beat('media', 'has space', {}, 1000), { name: 'StoreError', code: 'invalid_argument' });
    await t.rejects(store.nodes.beat('me dia', 'n', {}, 1000), { code: 'invalid_argument' });
    await t.rejects(store.nodes.beat('media', 'n', {}, 0), { code: 'invalid_argument' });
    await t.rejects(store.nodes.list(''), { code: 'invalid_argument' });
  });

  // ───────────────────────────── lifecycle

  test('ping answers while open; close is idempotent and ends waits', async (t, { store }) => {
    await store.ping();
    await store.queue.waitForWork('c', 50);
    const started = performance.now();
    const waiting = store.queue.waitForWork('c', 10_000);
    await store.close();
    await waiting;
    t.ok(performance.now() - started < 2000, 'close released the waiter');
    await store.close();
    await t.rejects(store.ping());
  });
}
