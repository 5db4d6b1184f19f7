/**
 * An impaired UDP link on loopback: a relay between a client and one target that delays (with
 * jitter, which reorders packets closer together than the jitter), and drops, each direction on
 * its own. The client sends to `listen`; the relay forwards from a socket of its own to `target`
 * and sends the target's answers back from `listen`. For links a peer must cross without network
 * namespaces (netem is absent on these kernels; the namespace lab emulates links the same way).
 *
 *   const relay = await startUdpRelay(t, {
 *     listen: { address: '::1', port }, target: { address: '127.0.0.1', port },
 *     up: { delayMs: 40, jitterMs: 10, lossPct: 3 }, down: { delayMs: 40, jitterMs: 10, lossPct: 3 },
 *   });
 *
 * Each packet is delayed by `delayMs ± jitterMs` (uniform), drawn on its own, so two packets sent
 * less than 2 × jitterMs apart may arrive swapped. Losses and delays come from a seeded generator
 * (`seed`, default 1) per direction: the same seed draws the same sequence. Timers are the event
 * loop's (≈ 1 ms resolution, later on a busy machine).
 */
import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface Impairment {
  /** One-way delay, ms. */
  delayMs: number;
  /** Each packet's delay is delayMs ± jitterMs (uniform), ms; 0: in order. */
  jitterMs: number;
  /** Share of packets dropped, percent (0–100). */
  lossPct: number;
  /** Seed of this direction's losses and delays (default 1). */
  seed?: number;
}

export interface Endpoint {
  address: string;
  port: number;
}

/** `up`: client → target; `down`: target → client. */
export type Direction = 'up' | 'down';

export interface DirectionStats {
  /** Packets that reached the relay. */
  received: number;
  /** Packets the relay dropped (loss). */
  dropped: number;
  /** Packets sent on. */
  forwarded: number;
  /** Packets sent on after a packet that reached the relay later than they did. */
  reordered: number;
}

export interface UdpRelay {
  stats(): Record<Direction, DirectionStats>;
  /** Changes a direction's impairment for the packets that arrive from now on. */
  set(dir: Direction, impairment: Impairment): void;
}

/** mulberry32: a small seeded generator of uniform numbers in [0, 1). */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Lane {
  readonly counts: DirectionStats = { received: 0, dropped: 0, forwarded: 0, reordered: 0 };
  #impairment: Impairment;
  #random: () => number;
  /** Arrival number of the latest packet sent on (to count reordering). */
  #lastSent = -1;

  constructor(impairment: Impairment) {
    this.#impairment = impairment;
    this.#random = generator(impairment.seed ?? 1);
  }

  set(impairment: Impairment): void {
    if (impairment.seed !== undefined && impairment.seed !== this.#impairment.seed) this.#random = generator(impairment.seed);
    this.#impairment = impairment;
  }

  /** Sends `packet` on after its delay through `send`, unless it is lost; `timers` holds it until then. */
  pass(packet: Buffer, send: (packet: Buffer) => void, timers: Set<NodeJS.Timeout>): void {
    const n = this.counts.received++;
    const { delayMs, jitterMs, lossPct } = this.#impairment;
    if (lossPct > 0 && this.#random() * 100 < lossPct) {
      this.counts.dropped++;
      return;
    }
    const delay = Math.max(0, delayMs + (jitterMs > 0 ? (this.#random() * 2 - 1) * jitterMs : 0));
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (n < this.#lastSent) this.counts.reordered++;
      this.#lastSent = Math.max(this.#lastSent, n);
      this.counts.forwarded++;
      send(packet);
    }, delay);
    timers.add(timer);
  }
}

function bind(address: string, port: number): Promise<Socket> {
  const socket = createSocket({ type: isIPv6(address) ? 'udp6' : 'udp4', ipv6Only: isIPv6(address) });
  return new Promise((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(port, address, () => {
      socket.off('error', reject);
      // A send to a peer that went away answers with ICMP: nothing to do about it here.
      socket.on('error', () => {});
      resolve(socket);
    });
  });
}

/** Starts the relay; it is closed (pending packets dropped) on `t`'s teardown. */
export async function startUdpRelay(t: Teardown, opts: { listen: Endpoint; target: Endpoint; up: Impairment; down: Impairment }): Promise<UdpRelay> {
  const lanes: Record<Direction, Lane> = { up: new Lane(opts.up), down: new Lane(opts.down) };
  const timers = new Set<NodeJS.Timeout>();
  const front = await bind(opts.listen.address, opts.listen.port);
  // One socket towards the target per client address, so the target tells clients apart.
  const backs = new Map<string, Promise<Socket>>();
  let closed = false;

  const backFor = (client: RemoteInfo): Promise<Socket> => {
    const key = `${client.address}:${client.port}`;
    let back = backs.get(key);
    if (!back) {
      back = bind(isIPv6(opts.target.address) ? '::1' : '127.0.0.1', 0).then((socket) => {
        socket.on('message', (packet) => lanes.down.pass(packet, (p) => !closed && front.send(p, client.port, client.address), timers));
        return socket;
      });
      backs.set(key, back);
    }
    return back;
  };
  front.on('message', (packet, client) => {
    void backFor(client).then((back) => lanes.up.pass(packet, (p) => !closed && back.send(p, opts.target.port, opts.target.address), timers));
  });

  t.teardown(async () => {
    closed = true;
    for (const timer of timers) clearTimeout(timer);
    timers.clear();
    const sockets = [front, ...(await Promise.all(backs.values()))];
    await Promise.all(sockets.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  });

  return {
    stats: () => ({ up: { ...lanes.up.counts }, down: { ...lanes.down.counts } }),
    set: (dir, impairment) => lanes[dir].set(impairment),
  };
}
