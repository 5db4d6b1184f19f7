/**
 * The impaired link of the network labs, measured from outside: UDP between the test's own
 * namespace and a lab namespace across the emulated link (impairedLink.ts), echoed back by a
 * small server there. Each test sets one impairment and checks that the traffic sees it — the
 * round trip, the reordering, the loss rate, the rate limit — against a clean link in the same
 * test, so a forwarder that did nothing would fail.
 */
import { createSocket, type Socket } from 'node:dgram';
import { createInterface } from 'node:readline';
import t, { type Test } from 'tap';
import { canUseNetns, createLab } from '../helpers/netns.ts';
import { until } from '../helpers/until.ts';
import type { ImpairedLink } from '../helpers/impairedLink.ts';

if (!(await canUseNetns())) {
  t.fail('network namespaces need root with iproute2 and nftables (CI runs as root; `bash .ci/run` installs them)');
  process.exit(1);
}

const PORT = 9000;
// Echoes the first 8 bytes (the sequence number) of every datagram: replies stay small, so only
// the direction under test carries the load.
const ECHO = `
const s = require('node:dgram').createSocket('udp4');
s.on('message', (m, r) => s.send(m.subarray(0, 8), r.port, r.address));
s.bind(${PORT}, process.argv[1], () => console.log('listening'));
`;

interface Echo {
  far: string;
  link: ImpairedLink;
  sock: Socket;
  /** Sequence number → ms (performance.now) when its echo came back. */
  replies: Map<number, number>;
  /** Sequence numbers in the order their echoes came back. */
  order: number[];
  send(seq: number, size: number): void;
}

/** A lab of one namespace across an impaired link from here, with the echo server in it. */
async function echoLab(t: Test, id: number): Promise<Echo> {
  const lab = await createLab(t, id, ['far']);
  const [here, far] = [lab.ip(0, 1), lab.ip(0, 2)];
  const link = await lab.impairedLink({ ns: null, addr: here }, { ns: 'far', addr: far });
  const server = lab.spawn('far', process.execPath, ['-e', ECHO, lab.ip(0, 2, false)], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: server.stdout! }).once('line', () => resolve());
    server.once('exit', (code) => reject(new Error(`echo server exited ${code}`)));
  });
  const sock = createSocket('udp4');
  t.teardown(() => sock.close());
  await new Promise<void>((resolve) => sock.bind(0, lab.ip(0, 1, false), resolve));
  const replies = new Map<number, number>();
  const order: number[] = [];
  sock.on('message', (m) => {
    const seq = m.readUInt32BE(0);
    replies.set(seq, performance.now());
    order.push(seq);
  });
  const farIp = lab.ip(0, 2, false);
  return {
    far: farIp,
    link,
    sock,
    replies,
    order,
    send(seq, size) {
      const b = Buffer.alloc(size);
      b.writeUInt32BE(seq, 0);
      sock.send(b, PORT, farIp);
    },
  };
}

/** Round trips (ms) of `n` pings sent one after another, each once the previous came back (or 1 s passed). */
async function pings(e: Echo, n: number, first: number): Promise<number[]> {
  const rtts: number[] = [];
  for (let seq = first; seq < first + n; seq++) {
    const sent = performance.now();
    e.send(seq, 64);
    const back = await until(`echo of ${seq}`, () => e.replies.get(seq), (v) => v !== undefined, 1_000, 1).catch(() => undefined);
    if (back !== undefined) rtts.push(back - sent);
  }
  return rtts;
}

/** Sends `n` datagrams of `size` bytes paced at `kbps` (in 10 ms batches); resolves when the last is out. */
async function paced(e: Echo, first: number, n: number, size: number, kbps: number): Promise<void> {
  const perBatch = Math.max(1, Math.round((kbps * 1000) / 8 / size / 100));
  const start = performance.now();
  for (let i = 0; i < n; i += perBatch) {
    for (let k = i; k < Math.min(n, i + perBatch); k++) e.send(first + k, size);
    const due = start + ((i + perBatch) / perBatch) * 10;
    await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

t.test('the round trip is twice the one-way delay, and jitter reorders packets', { timeout: 60_000 }, async (t) => {
  const e = await echoLab(t, 20);
  const clean = median(await pings(e, 20, 0));
  await e.link.set('both', { delayMs: 40 });
  const slow = await pings(e, 30, 1000);
  const rtt = median(slow);
  t.equal(slow.length, 30, 'every ping came back (no loss set)');
  // The delay is a floor; what a busy machine adds on top only lengthens some round trips, so the
  // shortest shows what the link itself adds.
  t.ok(Math.min(...slow) >= 80, `every round trip is at least 2 × 40 ms (shortest ${Math.min(...slow).toFixed(1)} ms, median ${rtt.toFixed(1)} ms; clean ${clean.toFixed(2)} ms)`);
  t.ok(Math.min(...slow) < 80 + clean + 10, `and the shortest not much more (${Math.min(...slow).toFixed(1)} ms)`);

  // 300 packets in 10 ms batches: in order on a link without jitter, overtaking each other with ± 10 ms.
  const inversions = async (first: number) => {
    const before = e.order.length;
    await paced(e, first, 300, 200, 1600);
    await until('every echo back', () => e.order.length - before, (n) => n >= 300, 10_000);
    const got = e.order.slice(before);
    return got.filter((s, i) => i > 0 && s < (got[i - 1] as number)).length;
  };
  t.equal(await inversions(10_000), 0, 'without jitter every packet arrives in order');
  await e.link.set('both', { jitterMs: 10 });
  const reordered = await inversions(20_000);
  t.ok(reordered > 30, `with ± 10 ms jitter packets overtake each other (${reordered} of 300 arrived after a later one)`);
  const jittered = await pings(e, 30, 30_000);
  const range = `${Math.min(...jittered).toFixed(1)}–${Math.max(...jittered).toFixed(1)} ms, median ${median(jittered).toFixed(1)} ms`;
  t.ok(Math.min(...jittered) >= 60, `jitter takes at most 10 ms off each way (${range})`);
  t.ok(jittered.some((r) => r < 80), 'and does take some off: round trips shorter than 80 ms, as well as longer');
  t.ok(Math.max(...jittered) - Math.min(...jittered) > 8, `single round trips spread (${range})`);
});

t.test('random loss takes the set share of packets, in one direction only', { timeout: 60_000 }, async (t) => {
  const e = await echoLab(t, 21);
  const n = 2000;
  const lostOf = async (first: number) => {
    await paced(e, first, n, 200, 800);
    // Done when the last echoes had time to come back: nothing new for 300 ms.
    let last = -1;
    await until('echoes settle', () => e.order.length, (len) => (len === last ? true : ((last = len), false)), 10_000, 300);
    let back = 0;
    for (let s = first; s < first + n; s++) if (e.replies.has(s)) back++;
    return 1 - back / n;
  };
  t.equal(await lostOf(0), 0, `a clean link loses nothing of ${n} packets`);
  const before = (await e.link.stats()).ab;
  await e.link.set('ab', { lossPercent: 10 });
  const lost = await lostOf(100_000);
  // Binomial(2000, 0.1): σ ≈ 0.67 points; ± 2 points is 3 σ.
  t.ok(lost > 0.08 && lost < 0.12, `10 % loss set: ${(lost * 100).toFixed(1)} % of ${n} packets lost`);
  const after = await e.link.stats();
  t.equal(after.ab.lost - before.lost, Math.round(lost * n), 'exactly the packets the link says it dropped');
  t.equal(after.ba.lost, 0, 'the other direction loses nothing');
});

t.test('a rate limit caps throughput and drops what its queue cannot hold', { timeout: 60_000 }, async (t) => {
  const e = await echoLab(t, 22);
  const size = 1000; // + 28 bytes of IP and UDP headers on the link
  // 2 Mb/s offered for 3 s. Two readings at the receiver: `span`, echoes per second between the
  // first echo and the last, and `cap`, echoes per second from the first send to the last echo.
  // A stall of this process bunches echoes; one at the start shortens the span and reads high,
  // but nothing shortens send-to-last-echo below what the link let through, so the upper bound is
  // checked on `cap` and the lower bound on `span`.
  const throughput = async (first: number) => {
    const n = Math.round((2000 * 1000 * 3) / 8 / size);
    const before = e.order.length;
    const sent = performance.now();
    await paced(e, first, n, size, 2000);
    let last = -1;
    await until('echoes settle', () => e.order.length, (len) => (len === last ? true : ((last = len), false)), 15_000, 500);
    const times = e.order.slice(before).map((s) => e.replies.get(s) as number);
    const bits = (times.length - 1) * (size + 28) * 8;
    const lastBack = Math.max(...times);
    return { span: bits / ((lastBack - Math.min(...times)) / 1000) / 1000, cap: bits / ((lastBack - sent) / 1000) / 1000 };
  };
  const clean = (await throughput(0)).span;
  t.ok(clean > 1800, `a clean link carries the 2 Mb/s offered (${clean.toFixed(0)} kb/s)`);
  await e.link.set('ab', { rateKbps: 600, queueBytes: 30_000 });
  const capped = await throughput(100_000);
  const read = `${capped.cap.toFixed(0)} kb/s from the first send, ${capped.span.toFixed(0)} kb/s between echoes`;
  t.ok(capped.cap <= 600 * 1.03, `600 kb/s set: no more gets through (${read})`);
  t.ok(capped.span > 600 * 0.9, `and not much less (${read})`);
  const { ab } = await e.link.stats();
  t.ok(ab.queueDrops > 0, `the excess is dropped at the queue (${ab.queueDrops} packets), not held forever`);
  t.equal(ab.lost, 0, 'no random loss was set');
});
