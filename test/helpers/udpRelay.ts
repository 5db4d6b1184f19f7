/**
 * A UDP relay with an impaired link in each direction (delay, jitter, loss), in user space: the
 * kernel here has no netem. Datagrams a client sends to `listen` go on to `target` from a socket
 * of the relay's own (one per client address), and the target's answers come back to the client
 * from `listen`. `up` impairs client → target, `down` target → client.
 *
 *   const relay = await startUdpRelay(t, {
 *     listen: { address: '198.18.164.1', port: 41000 }, target: { address: '127.0.0.1', port: 41000 },
 *     up: { delayMs: 40, jitterMs: 0, lossPct: 3, seed: 1 }, down: { delayMs: 40, jitterMs: 0, lossPct: 3, seed: 2 },
 *   });
 *
 * A WebRTC node reached through it announces the relay's address (WEBRTC_ANNOUNCED_ADDRESSES) on
 * the ports it binds (WEBRTC_UDP_PORT_RANGE; two ports at least, a relay on each). Jitter delays each datagram on its own
 * (uniform in ±jitterMs), so it reorders them; 0 keeps the order. Loss is drawn from a seeded
 * generator, so a run is repeatable in what it drops. The relay counts RTP by sequence number
 * (its header is clear in SRTP): the packets a sender sent once and what was sent again.
 */
import { createSocket, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface Impairment {
  /** ms added to every datagram. */
  delayMs: number;
  /** ms, uniform in ±jitterMs on top of delayMs (reorders datagrams); 0: order kept. */
  jitterMs: number;
  /** Percent of datagrams dropped (0–100). */
  lossPct: number;
  /** Seed of the loss and jitter draws (default 1). */
  seed?: number;
}

export type RelayDirection = 'up' | 'down';

export interface DirectionStats {
  /** Datagrams that reached the relay in this direction. */
  packets: number;
  bytes: number;
  /** Of those, dropped by the impairment. */
  dropped: number;
  /** Of those, sent on. */
  forwarded: number;
  /** RTP packets among them (not RTCP, STUN or DTLS), and how many distinct (SSRC, sequence number) they carried. */
  rtpPackets: number;
  rtpDistinct: number;
  /** RTP packets sent on. */
  rtpForwarded: number;
  /** Datagrams sent on after one that reached the relay later than they did (jitter's reordering). */
  reordered: number;
}

export interface UdpRelay {
  /** Totals since the start, per direction. */
  stats(): Record<RelayDirection, DirectionStats>;
  /** Changes a direction's impairment from the next datagram on. */
  set(dir: RelayDirection, impairment: Impairment): void;
}

/** mulberry32: a small seeded generator, uniform in [0, 1). */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** RTP, not RTCP (RFC 5761 §4: payload types 64–95 are RTCP when muxed), STUN (0–3) or DTLS (20–63). */
function rtpKey(msg: Buffer): number | null {
  if (msg.length < 12 || msg[0] === undefined || msg[0] >> 6 !== 2) return null;
  const pt = (msg[1] as number) & 0x7f;
  if (pt >= 64 && pt <= 95) return null;
  return msg.readUInt32BE(8) * 0x10000 + msg.readUInt16BE(2);
}

class Direction {
  readonly stats: DirectionStats = { packets: 0, bytes: 0, dropped: 0, forwarded: 0, rtpPackets: 0, rtpDistinct: 0, rtpForwarded: 0, reordered: 0 };
  readonly #seen = new Set<number>();
  /** Arrival index of the latest-arrived datagram sent on so far. */
  #lastSent = -1;
  #imp: Impairment;
  #rand: () => number;

  constructor(imp: Impairment) {
    this.#imp = imp;
    this.#rand = random(imp.seed ?? 1);
  }

  set(imp: Impairment): void {
    this.#imp = imp;
    if (imp.seed !== undefined) this.#rand = random(imp.seed);
  }

  /** Counts `msg` and calls `send` after its delay, unless it is dropped. */
  pass(msg: Buffer, send: () => void, timers: Set<NodeJS.Timeout>): void {
    const s = this.stats;
    const n = s.packets++;
    s.bytes += msg.length;
    const key = rtpKey(msg);
    if (key !== null) {
      s.rtpPackets++;
      if (!this.#seen.has(key)) {
        this.#seen.add(key);
        s.rtpDistinct++;
      }
    }
    if (this.#rand() * 100 < this.#imp.lossPct) {
      s.dropped++;
      return;
    }
    s.forwarded++;
    if (key !== null) s.rtpForwarded++;
    const delay = Math.max(0, this.#imp.delayMs + (this.#imp.jitterMs > 0 ? (this.#rand() * 2 - 1) * this.#imp.jitterMs : 0));
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (n < this.#lastSent) s.reordered++;
      this.#lastSent = Math.max(this.#lastSent, n);
      send();
    }, delay);
    timers.add(timer);
  }
}

export async function startUdpRelay(
  t: Teardown,
  opts: { listen: { address: string; port: number }; target: { address: string; port: number }; up: Impairment; down: Impairment },
): Promise<UdpRelay> {
  const dirs = { up: new Direction(opts.up), down: new Direction(opts.down) };
  const timers = new Set<NodeJS.Timeout>();
  /** One socket toward the target per client address, so the target tells clients apart. */
  const upstream = new Map<string, Socket>();
  // Either side may be IPv6: e.g. a client kept off the target's IPv4 loopback address reaches it only through the relay.
  const outer = createSocket(isIPv6(opts.listen.address) ? 'udp6' : 'udp4');
  // Many datagrams may wait in the delay line; the kernel's default buffers drop a key frame's burst.
  const bufferBytes = 4 * 1024 * 1024;
  outer.on('message', (msg, from) => {
    const key = `${from.address}:${from.port}`;
    let sock = upstream.get(key);
    if (!sock) {
      const s = createSocket(isIPv6(opts.target.address) ? 'udp6' : 'udp4');
      s.on('message', (back) => dirs.down.pass(back, () => outer.send(back, from.port, from.address), timers));
      s.on('error', () => {});
      s.bind(0, opts.target.address, () => s.setRecvBufferSize(bufferBytes));
      upstream.set(key, s);
      sock = s;
    }
    const to = sock;
    dirs.up.pass(msg, () => to.send(msg, opts.target.port, opts.target.address), timers);
  });
  outer.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    outer.once('error', reject);
    outer.bind(opts.listen.port, opts.listen.address, () => {
      outer.off('error', reject);
      outer.setRecvBufferSize(bufferBytes);
      resolve();
    });
  });
  t.teardown(() => {
    for (const timer of timers) clearTimeout(timer);
    timers.clear();
    for (const s of upstream.values()) s.close();
    outer.close();
  });
  return {
    stats: () => ({ up: { ...dirs.up.stats }, down: { ...dirs.down.stats } }),
    set: (dir, imp) => dirs[dir].set(imp),
  };
}
