/**
 * The publisher NACK logic on a simulated clock (1 ms ticks): a sequence wrap with losses on both
 * sides, reordering inside the window, retries paced by the round trip and bounded in number, the
 * bitrate share, counter restarts and bounded memory under a flood of random numbers.
 */
import t from 'tap';
import { NackGenerator, type NackGeneratorOptions } from '../../../media/webrtc/NackGenerator.ts';

/** A packet that arrives at `atMs`, `bytes` long (default 1000). */
type Arrival = { seq: number; atMs: number; bytes?: number };

/**
 * Runs the generator from 0 to `endMs` in 1 ms ticks: each tick delivers the packets due, then
 * polls (as the session does on every packet and at nextDueMs). Returns every request with its time.
 */
function simulate(gen: NackGenerator, arrivals: Arrival[], endMs: number, onNack?: (seqs: number[], nowMs: number) => Arrival[]) {
  const requests: { seq: number; atMs: number }[] = [];
  const queue = [...arrivals].sort((a, b) => a.atMs - b.atMs);
  for (let now = 0; now <= endMs; now++) {
    while (queue.length > 0 && (queue[0] as Arrival).atMs <= now) {
      const a = queue.shift() as Arrival;
      gen.push(a.seq, a.bytes ?? 1000, now);
    }
    const seqs = gen.poll(now);
    if (seqs.length === 0 && gen.nextDueMs(now) < now) throw new Error(`nextDueMs ${gen.nextDueMs(now)} is past at ${now} and poll() sent nothing`);
    for (const seq of seqs) requests.push({ seq, atMs: now });
    if (seqs.length > 0 && onNack) {
      queue.push(...onNack(seqs, now));
      queue.sort((a, b) => a.atMs - b.atMs);
    }
  }
  return requests;
}

/** `count` packets from `first` (wrapping at 65536), one every `everyMs` from `fromMs`, less `drop`. */
function stream(first: number, count: number, opts: { everyMs?: number; fromMs?: number; drop?: number[] } = {}): Arrival[] {
  const every = opts.everyMs ?? 2;
  const out: Arrival[] = [];
  for (let i = 0; i < count; i++) {
    const seq = (first + i) & 0xffff;
    if (!opts.drop?.includes(seq)) out.push({ seq, atMs: (opts.fromMs ?? 0) + i * every });
  }
  return out;
}

const gen = (o: NackGeneratorOptions = {}) => new NackGenerator({ initialRttMs: 50, maxBitrateShare: 1, ...o });

t.test('a sequence wrap with losses on both sides of it gets a NACK for every gap, once per retry interval', async (t) => {
  const g = gen({ maxRetries: 3 });
  const lost = [65530, 65534, 65535, 0, 1, 7];
  // 65520 … 65535, 0 … 49: 66 packets, 2 ms apart.
  const requests = simulate(g, stream(65520, 66, { drop: lost }), 1_000);
  const bySeq = new Map<number, number[]>();
  for (const r of requests) bySeq.set(r.seq, [...(bySeq.get(r.seq) ?? []), r.atMs]);
  t.same([...bySeq.keys()].sort((a, b) => a - b), [...lost].sort((a, b) => a - b), 'every lost number, and only those, asked for (both sides of the wrap)');
  for (const [seq, times] of bySeq) {
    t.equal(times.length, 3, `${seq}: asked for maxRetries times, then given up`);
    const gaps = times.slice(1).map((at, i) => at - (times[i] as number));
    t.ok(
      gaps.every((d) => d >= g.retryIntervalMs && d <= g.retryIntervalMs + 1),
      `${seq}: retries one retry interval apart (${gaps.join(', ')} ms; interval ${g.retryIntervalMs} ms for a 50 ms round trip)`,
    );
  }
  t.equal(g.lost, lost.length, 'the loss counted once per number');
  t.equal(g.givenUp, lost.length, 'every one given up after its last try');
  t.equal(g.missing, 0, 'nothing left tracked');
});

t.test('a packet that arrives after the wrap from before it (a late retransmission) is no new gap', async (t) => {
  const g = gen();
  // 65534 is lost, then its retransmission arrives long after the counter wrapped.
  const arrivals = [...stream(65530, 20, { drop: [65534] }), { seq: 65534, atMs: 200 }, ...stream(14, 20, { fromMs: 202 })];
  const requests = simulate(g, arrivals, 600);
  t.ok(requests.length > 0 && requests.every((r) => r.seq === 65534), `only 65534 asked for (${requests.length} requests)`);
  t.equal(g.recovered, 1, 'the retransmission filled it');
  const before = requests.length;
  // The stream goes on: a loss after the wrap is still asked for.
  const later = simulate(g, stream(34, 20, { fromMs: 700, drop: [45] }), 1_000);
  t.ok(before > 0 && later.some((r) => r.seq === 45), 'a loss after the wrap and the late packet is NACKed');
});

t.test('reordering inside the window produces no NACK', async (t) => {
  const g = gen({ reorderPackets: 3, reorderMs: 10 });
  // Packets 4 ms apart; 5 comes 8 ms after 6 (after 7, with 8: two packets later, inside both the
  // 3-packet distance and the 10 ms).
  const arrivals = stream(0, 30, { everyMs: 4 }).map((a) => (a.seq === 5 ? { ...a, atMs: a.atMs + 12 } : a));
  const requests = simulate(g, arrivals, 200);
  t.same(requests, [], 'no request');
  t.equal(g.reordered, 1, 'counted as reordered');
  t.equal(g.lost, 0, 'not as lost');
});

t.test('the window learns the reordering of the link: late packets later stop drawing NACKs', async (t) => {
  const g = gen({ reorderPackets: 3, reorderMs: 10, maxRetries: 1 });
  // The round trip is known (the session has it from ICE before media flows): a packet that comes
  // sooner after its NACK than half of it is the late original, not the retransmission.
  g.addRttSample(50);
  // Every 10th packet comes 7 packets (16 ms) late: beyond the floors, so the first ones are NACKed.
  const arrivals = stream(0, 400).map((a) => (a.seq % 10 === 5 ? { ...a, atMs: a.atMs + 16 } : a));
  const requests = simulate(g, arrivals, 900);
  const early = requests.filter((r) => r.atMs < 100).length;
  const late = requests.filter((r) => r.atMs >= 400).length;
  t.ok(early <= 2, `at most the first late packets were asked for (${early})`);
  t.equal(late, 0, 'once learnt, the reordering draws no NACK');
  t.ok(g.reorderPackets(800) >= 8, `the distance grew to cover it (${g.reorderPackets(800)} packets)`);
});

t.test('retries stop after the bound', async (t) => {
  const g = gen({ maxRetries: 4 });
  const requests = simulate(g, stream(100, 500, { drop: [150] }), 2_000);
  t.equal(requests.length, 4, 'asked for 4 times');
  t.equal(g.givenUp, 1);
  t.equal(g.missing, 0);
});

t.test('retries follow the measured round trip', async (t) => {
  const g = new NackGenerator({ initialRttMs: 20, maxBitrateShare: 1, maxRetries: 3 });
  // A 120 ms sample from elsewhere (the session's ICE consent checks) replaces the 20 ms guess.
  g.addRttSample(120);
  t.equal(g.rttMs, 120);
  const times = simulate(g, stream(0, 400, { drop: [10] }), 800).map((r) => r.atMs);
  t.equal(times.length, 3, 'three NACKs');
  const gaps = times.slice(1).map((at, i) => at - (times[i] as number));
  t.ok(
    gaps.every((d) => d >= 120 * 1.25),
    `retried ${gaps.join(', ')} ms apart: after the round trip, not every 5 ms`,
  );
});

t.test('a retransmission answering a single NACK measures the round trip', async (t) => {
  const g = new NackGenerator({ initialRttMs: 300, maxBitrateShare: 1 });
  simulate(g, stream(0, 300, { drop: [20, 120, 220] }), 800, (seqs, now) => seqs.map((seq) => ({ seq, atMs: now + 60 })));
  t.equal(g.recovered, 3);
  t.ok(g.rttMs < 300 && g.rttMs >= 60, `the 60 ms answers replaced the 300 ms guess (${g.rttMs.toFixed(1)} ms)`);
});

t.test('requests never ask for more than the bitrate share', async (t) => {
  const share = 0.1;
  const g = new NackGenerator({ initialRttMs: 50, maxBitrateShare: share, maxRetries: 10 });
  // Half the packets lost for 2 s, 1000 bytes each.
  const drop = Array.from({ length: 1000 }, (_, i) => 2 * i + 1);
  const arrivals = stream(0, 2000, { everyMs: 1, drop });
  const requests = simulate(g, arrivals, 2_500);
  const receivedBytes = arrivals.length * 1000;
  const askedBytes = requests.length * 1000;
  t.ok(askedBytes <= share * receivedBytes + 1000, `asked for ${askedBytes} B of ${receivedBytes} B received (share ${share})`);
  t.ok(askedBytes >= 0.5 * share * receivedBytes, 'and the share is used (the requests are not starved)');
  t.ok(g.deferred > 0, 'requests were held back');
});

t.test('a counter restart (a jump past maxJump) is no loss', async (t) => {
  const g = gen();
  const requests = simulate(g, [...stream(1000, 20), ...stream(40_000, 20, { fromMs: 40 })], 300);
  t.same(requests, [], 'nothing asked for');
  t.equal(g.lost, 0);
});

t.test('a flood of random sequence numbers keeps memory and work bounded', { timeout: 30_000 }, async (t) => {
  const g = new NackGenerator({ maxMissing: 500 });
  let x = 12345;
  const t0 = performance.now();
  for (let i = 0; i < 20_000; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    g.push(x & 0xffff, 100 + (x % 1200), i);
    g.poll(i);
    if (g.missing > 500) return t.fail(`tracked ${g.missing} gaps`);
  }
  // Each call walks at most maxMissing gaps: bounded, whatever the numbers.
  t.ok(g.missing <= 500, `20,000 random packets in ${(performance.now() - t0).toFixed(0)} ms, ${g.missing} gaps tracked`);
});
