/**
 * Decides which of a publisher's RTP packets to ask for again (RFC 4585 §6.2.1 generic NACK), and
 * when. It replaces werift's receiver NACK handler, which compared sequence numbers without wrap
 * arithmetic (after losing packet 65535 it asked for ≈ 150 packets ten times, then never again
 * until the next wrap, minutes later), asked for every gap at once and again every 5 ms ten times
 * (≈ 55 ms, shorter than most round trips; on a reordering link the node received ≈ 5× the
 * packets the publisher sent), and had no allowance for reordering (decision 0021).
 *
 * - Sequence numbers are extended past 16 bits (RFC 3550 A.1), so a wrap is only the next number.
 * - Reorder window: a gap is asked for once a few later packets or a short time show it is a
 *   loss. Both thresholds grow with the reordering seen (a "missing" packet that arrives before its
 *   first NACK) and shrink back to their floors once the link stops reordering.
 * - Retries are paced by the round trip (a retransmission cannot come sooner) and bounded in count.
 * - Requests never ask for more than `maxBitrateShare` of the bytes the stream brings in (a
 *   token bucket filled by every packet received): a burst of loss does not become a storm.
 *
 * Pure logic on the caller's clock (ms): the session calls push() for every packet and poll()
 * when nextDueMs() comes, and sends what poll() returns. Memory and work per call are bounded
 * by `maxMissing`.
 */
import { seqAfter } from './RtpArrival.ts';

export interface NackGeneratorOptions {
  /** NACKs sent for one packet at most, before it is given up. Default 10 (libwebrtc's bound). */
  maxRetries?: number;
  /** Largest share (0–1) of the received bytes that requests may ask for again. Default 0.25. */
  maxBitrateShare?: number;
  /** Later packets that show a gap is a loss, at least (grows with the reordering seen). Default 3. */
  reorderPackets?: number;
  /** ms after which a gap is a loss, at least (grows with the reordering seen). Default 10. */
  reorderMs?: number;
  /** Round trip assumed before one is measured, ms. Default 100 (libwebrtc's default). */
  initialRttMs?: number;
  /** Gaps tracked at once; older ones are given up beyond it. Default 1000 (≈ 1 s at 10 Mb/s). */
  maxMissing?: number;
  /** A forward jump of more sequence numbers than this is a new counter, not a loss. Default 3000 (as ReorderBuffer). */
  maxJump?: number;
}

interface Missing {
  /** When the gap was seen (a later packet arrived), ms. */
  seenAtMs: number;
  /** NACKs sent for it. */
  sends: number;
  /** When the first NACK went, ms (for a round-trip sample when exactly one went). */
  firstSentAtMs: number;
  /** When the next NACK may go, ms (retries). */
  nextAtMs: number;
  /** Counted in `lost` (it left the reorder window without arriving). */
  counted: boolean;
}


/** ms over which the reorder thresholds remember what they saw (two windows of it: 5–10 s). */
const REORDER_MEMORY_MS = 5_000;
/** The reorder time never waits longer than this, ms: past it a NACK is due whatever the link does. */
const REORDER_MAX_MS = 100;
/** Nor the reorder distance more packets than this. */
const REORDER_MAX_PACKETS = 64;
/** A retry waits the smoothed round trip times this, plus RETRY_MARGIN_MS (the publisher's send queue, our timer). */
const RETRY_RTT_FACTOR = 1.25;
const RETRY_MARGIN_MS = 5;
/** Round trips below this are not believed, ms (a loopback path still takes a timer tick). */
const MIN_RTT_MS = 1;
/** Before any packet's size is known, bytes. */
const DEFAULT_PACKET_BYTES = 1200;

/** A maximum over a sliding time window, kept as the maxima of two consecutive windows. */
class RecentMax {
  #current = 0;
  #previous = 0;
  #windowStartMs = -Infinity;

  add(v: number, nowMs: number): void {
    this.#rotate(nowMs);
    if (v > this.#current) this.#current = v;
  }

  get(nowMs: number): number {
    this.#rotate(nowMs);
    return Math.max(this.#current, this.#previous);
  }

  #rotate(nowMs: number): void {
    if (nowMs - this.#windowStartMs < REORDER_MEMORY_MS) return;
    // One window passed: the current becomes the previous; two or more: both are old.
    this.#previous = nowMs - this.#windowStartMs < 2 * REORDER_MEMORY_MS ? this.#current : 0;
    this.#current = 0;
    this.#windowStartMs = nowMs;
  }
}

export class NackGenerator {
  readonly #maxRetries: number;
  readonly #share: number;
  readonly #reorderPacketsFloor: number;
  readonly #reorderMsFloor: number;
  readonly #maxMissing: number;
  readonly #maxJump: number;
  /** Highest extended sequence number received (null before the first packet). */
  #highest: number | null = null;
  /** Gaps by extended sequence number, oldest first (insertion order is ascending). */
  readonly #missing = new Map<number, Missing>();
  #srttMs: number;
  #rttMeasured = false;
  /** Bytes the requests may still ask for (a token bucket filled by received bytes × share). */
  #budget = 0;
  /** Mean size of a received packet, bytes (exponential average): what one request costs. */
  #packetBytes = DEFAULT_PACKET_BYTES;
  readonly #reorderDistance = new RecentMax();
  readonly #reorderDelay = new RecentMax();

  /** Distinct packets received (each sequence number once; retransmissions that filled a gap included). */
  received = 0;
  /** Packets received again (a retransmission after the original, or a copy). */
  duplicates = 0;
  /** Sequence numbers that left the reorder window without arriving: the link's loss, before repair. */
  lost = 0;
  /** Of those, the ones that arrived after a NACK. */
  recovered = 0;
  /** Gaps that filled with the original packet (reordering, not loss), before a NACK or sooner than a retransmission could come. */
  reordered = 0;
  /** Sequence numbers given up (retries spent, a gap dropped for a newer one, or forget()). */
  givenUp = 0;
  /** Sequence number requests sent (one per number per NACK). */
  requests = 0;
  /** Requests held back by the bitrate share (they go when the budget allows). */
  deferred = 0;

  constructor(opts: NackGeneratorOptions = {}) {
    this.#maxRetries = opts.maxRetries ?? 10;
    this.#share = opts.maxBitrateShare ?? 0.25;
    this.#reorderPacketsFloor = opts.reorderPackets ?? 3;
    this.#reorderMsFloor = opts.reorderMs ?? 10;
    this.#srttMs = opts.initialRttMs ?? 100;
    this.#maxMissing = opts.maxMissing ?? 1000;
    this.#maxJump = opts.maxJump ?? 3000;
  }

  /** Smoothed round trip, ms (the initial value until a sample came). */
  get rttMs(): number {
    return this.#srttMs;
  }

  /** A round trip was measured (rttMs is no longer the initial guess). */
  get rttMeasured(): boolean {
    return this.#rttMeasured;
  }

  /** ms between two NACKs of one packet: a retransmission cannot arrive sooner. */
  get retryIntervalMs(): number {
    return this.#srttMs * RETRY_RTT_FACTOR + RETRY_MARGIN_MS;
  }

  /** ms a gap waits before its first NACK, now (the reorder window's time). */
  reorderMs(nowMs: number): number {
    return Math.min(REORDER_MAX_MS, Math.max(this.#reorderMsFloor, this.#reorderDelay.get(nowMs)));
  }

  /** Later packets that make a gap a loss, now (the reorder window's distance). */
  reorderPackets(nowMs: number): number {
    return Math.min(REORDER_MAX_PACKETS, Math.max(this.#reorderPacketsFloor, this.#reorderDistance.get(nowMs) + 1));
  }

  /** Gaps being tracked. */
  get missing(): number {
    return this.#missing.size;
  }

  /**
   * A round-trip sample from elsewhere (ICE consent checks), ms. The first one replaces the
   * initial guess; later ones are averaged in like our own (RFC 6298's 1/8).
   */
  addRttSample(ms: number): void {
    if (!Number.isFinite(ms) || ms <= 0) return;
    const v = Math.max(MIN_RTT_MS, ms);
    this.#srttMs = this.#rttMeasured ? this.#srttMs + (v - this.#srttMs) / 8 : v;
    this.#rttMeasured = true;
  }

  /** A packet arrived (`bytes` on the wire, roughly). */
  push(seq: number, bytes: number, nowMs: number): void {
    this.#packetBytes += (bytes - this.#packetBytes) / 16;
    if (this.#highest === null) {
      this.#start(seq, bytes);
      return;
    }
    const d = seqAfter(this.#highest & 0xffff, seq);
    if (d > this.#maxJump || d < -this.#maxJump) {
      // A publisher that restarted its counter: nothing before it is worth asking for.
      for (const [ext, m] of this.#missing) this.#giveUp(ext, m);
      this.#start(seq, bytes);
      return;
    }
    if (d > 0) {
      for (let ext = this.#highest + 1; ext < this.#highest + d; ext++) {
        this.#missing.set(ext, { seenAtMs: nowMs, sends: 0, firstSentAtMs: 0, nextAtMs: nowMs, counted: false });
      }
      this.#highest += d;
      this.#trim();
      this.#received(bytes);
      return;
    }
    const ext = this.#highest + d;
    const m = d < 0 ? this.#missing.get(ext) : undefined;
    if (!m) {
      // The same number again (a retransmission after the original came, a copy) or one given up.
      this.duplicates++;
      return;
    }
    this.#missing.delete(ext);
    this.#received(bytes);
    if (m.sends === 0) {
      // It was only late: the window learns how late packets come on this link.
      this.#learnReorder(-d, nowMs - m.seenAtMs, nowMs);
      return;
    }
    if (this.#rttMeasured && nowMs - m.firstSentAtMs < this.#srttMs / 2) {
      // Sooner than any retransmission could come (the round trip is measured, not the guess):
      // the original, later than the window allowed. It was no loss; the window widens to it.
      this.lost--;
      this.#learnReorder(-d, nowMs - m.seenAtMs, nowMs);
      return;
    }
    this.recovered++;
    // Karn's rule: only a packet asked for once tells how long the round trip took.
    if (m.sends === 1) this.addRttSample(nowMs - m.firstSentAtMs);
  }

  /**
   * The sequence numbers (16-bit, oldest first) to put in a NACK now; each counts as one more try.
   * Empty when nothing is due or the bitrate share is spent.
   */
  poll(nowMs: number): number[] {
    const out: number[] = [];
    if (this.#highest === null) return out;
    const distance = this.reorderPackets(nowMs);
    const reorderMs = this.reorderMs(nowMs);
    const retryMs = this.retryIntervalMs;
    for (const [ext, m] of this.#missing) {
      if (m.sends === 0 ? this.#highest - ext < distance && nowMs - m.seenAtMs < reorderMs : nowMs < m.nextAtMs) continue;
      if (!m.counted) {
        m.counted = true;
        this.lost++;
      }
      if (m.sends >= this.#maxRetries) {
        // The last try had its round trip to answer: give it up.
        this.#giveUp(ext, m);
        continue;
      }
      if (this.#budget < this.#packetBytes) {
        // The share is spent: this one and every later one wait for more bytes to come in.
        this.deferred++;
        break;
      }
      this.#budget -= this.#packetBytes;
      if (m.sends === 0) m.firstSentAtMs = nowMs;
      m.sends++;
      m.nextAtMs = nowMs + retryMs;
      this.requests++;
      out.push(ext & 0xffff);
    }
    return out;
  }

  /**
   * ms when poll() may have something to send: Infinity when no gap is tracked, or while the
   * bitrate share is spent (only a received packet refills it, and the caller polls on each).
   */
  nextDueMs(nowMs: number): number {
    if (this.#missing.size === 0 || this.#budget < this.#packetBytes) return Infinity;
    const reorderMs = this.reorderMs(nowMs);
    let due = Infinity;
    for (const m of this.#missing.values()) {
      // First NACKs: the reorder time after the gap was seen (the packet rule is met on a push).
      const at = m.sends === 0 ? m.seenAtMs + reorderMs : m.nextAtMs;
      if (at < due) due = at;
    }
    return due;
  }

  /** Stops asking for every sequence number before `seq` (the reorder buffer stopped waiting for them). */
  forgetBefore(seq: number): void {
    if (this.#highest === null) return;
    const before = this.#highest + seqAfter(this.#highest & 0xffff, seq);
    for (const [ext, m] of this.#missing) {
      if (ext >= before) break;
      this.#giveUp(ext, m);
    }
  }

  #giveUp(ext: number, m: Missing): void {
    this.#missing.delete(ext);
    this.givenUp++;
    if (!m.counted) this.lost++;
  }

  /** A packet came `distance` packets and `delayMs` after its gap was seen, and was no loss. */
  #learnReorder(distance: number, delayMs: number, nowMs: number): void {
    this.reordered++;
    this.#reorderDistance.add(distance, nowMs);
    // + 1 ms: the next one as late is inside the window, not on its edge.
    this.#reorderDelay.add(delayMs + 1, nowMs);
  }

  #start(seq: number, bytes: number): void {
    // Extended numbers start a cycle up, so that a reordered packet from before the first stays positive.
    this.#highest = 0x10000 + seq;
    this.#received(bytes);
  }

  #received(bytes: number): void {
    this.received++;
    // The bucket holds at most the share of 200 average packets (≈ 1.3 s of a 1.5 Mb/s stream):
    // what a burst of loss may ask for at once.
    this.#budget = Math.min(this.#budget + bytes * this.#share, 200 * this.#packetBytes * this.#share);
  }

  /** Gaps beyond maxMissing: the oldest are given up (a burst that large is past repair by NACK). */
  #trim(): void {
    for (const [ext, m] of this.#missing) {
      if (this.#missing.size <= this.#maxMissing) break;
      this.#giveUp(ext, m);
    }
  }
}
