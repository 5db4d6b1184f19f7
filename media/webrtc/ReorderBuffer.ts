/**
 * Puts a publisher's RTP packets back in sequence order and says what was lost.
 *
 * In-order packets pass at once. A packet after a gap waits, with later ones, until the gap
 * fills (a reordered packet, or the retransmission our NACK asked for) or until the oldest
 * waiting packet has waited `latencyMs` (or `maxWaiting` packets wait): then the gap is declared
 * lost and delivery resumes after it. A sequence jump larger than `maxJump` (a publisher that
 * restarted its counter) resets the buffer, and so do 64 packets in a row from far behind (a
 * restart that looks like the past in 16-bit sequence space). Late and duplicate packets are
 * dropped.
 *
 * Every operation is O(1) per packet (a map keyed by sequence number) and bounded in memory and
 * work whatever arrives. It replaces werift's JitterBufferBase, whose flush walks sequence numbers
 * until its buffer is empty (up to 65,536 steps per packet) and whose state wrapped after a burst
 * of loss under overload, declaring ~65,000 packets lost per packet and delivering nothing more.
 */
import { seqAfter } from './RtpArrival.ts';

export interface ReorderBufferOptions {
  /** ms a packet after a gap waits for the gap to fill. Default 100 (a NACK round trip fits). */
  latencyMs?: number;
  /** Packets waiting after a gap at most, before the gap is declared lost. Default 256. */
  maxWaiting?: number;
  /** A forward jump of more sequence numbers than this resets the buffer. Default 3000. */
  maxJump?: number;
}

export interface ReorderResult<T> {
  /** Packets to hand on, in sequence order. */
  packets: T[];
  /** Sequence numbers declared lost by this call. */
  lost: number;
}

/** Packets in a row from far behind that mean the sender restarted its sequence counter. */
const FAR_BEHIND_RESET = 64;


export class ReorderBuffer<T> {
  #latencyMs: number;
  readonly #maxWaiting: number;
  readonly #maxJump: number;
  /** The next sequence number to hand on (null before the first packet). */
  #expected: number | null = null;
  readonly #waiting = new Map<number, { packet: T; atMs: number }>();
  /** Arrival time of the oldest waiting packet. */
  #oldestAtMs = Infinity;
  /** Packets in a row from more than maxJump behind. */
  #farBehind = 0;
  /** Totals, for stats. */
  delivered = 0;
  lost = 0;
  late = 0;

  constructor(opts: ReorderBufferOptions = {}) {
    this.#latencyMs = opts.latencyMs ?? 100;
    this.#maxWaiting = opts.maxWaiting ?? 256;
    this.#maxJump = opts.maxJump ?? 3000;
  }

  push(seq: number, packet: T, nowMs: number): ReorderResult<T> {
    const out: ReorderResult<T> = { packets: [], lost: 0 };
    if (this.#expected === null) this.#expected = seq;
    const d = seqAfter(this.#expected, seq);
    if (d < -this.#maxJump && ++this.#farBehind >= FAR_BEHIND_RESET) {
      this.#flush(out);
      this.#expected = seq;
    } else if (d < 0 || this.#waiting.has(seq)) {
      this.late++;
      return this.#timeouts(nowMs, out);
    } else if (d > this.#maxJump) {
      // Not a gap but a new counter: whatever waited is handed on (in order), then this one.
      this.#flush(out);
      this.#expected = seq;
    }
    if (d >= -this.#maxJump) this.#farBehind = 0;
    if (seqAfter(this.#expected, seq) === 0) {
      this.#farBehind = 0;
      out.packets.push(packet);
      this.#expected = (seq + 1) & 0xffff;
      this.#drain(out);
    } else {
      this.#waiting.set(seq, { packet, atMs: nowMs });
      if (nowMs < this.#oldestAtMs) this.#oldestAtMs = nowMs;
    }
    return this.#timeouts(nowMs, out);
  }

  /** Declares the current gap lost while the oldest waiting packet waited too long, or too many wait. */
  #timeouts(nowMs: number, out: ReorderResult<T>): ReorderResult<T> {
    while (this.#waiting.size > 0 && (nowMs - this.#oldestAtMs >= this.#latencyMs || this.#waiting.size > this.#maxWaiting)) {
      // Skip to the first waiting packet after the gap.
      let next = -1;
      let best = Infinity;
      for (const seq of this.#waiting.keys()) {
        const dist = seqAfter(this.#expected as number, seq);
        if (dist < best) {
          best = dist;
          next = seq;
        }
      }
      out.lost += best;
      this.lost += best;
      this.#expected = next;
      this.#drain(out);
    }
    this.delivered += out.packets.length;
    return out;
  }

  /** Hands on waiting packets that now follow in sequence. */
  #drain(out: ReorderResult<T>): void {
    for (let w = this.#waiting.get(this.#expected as number); w; w = this.#waiting.get(this.#expected as number)) {
      this.#waiting.delete(this.#expected as number);
      out.packets.push(w.packet);
      this.#expected = ((this.#expected as number) + 1) & 0xffff;
    }
    this.#oldestAtMs = Infinity;
    for (const w of this.#waiting.values()) if (w.atMs < this.#oldestAtMs) this.#oldestAtMs = w.atMs;
  }

  /** Hands on everything waiting, in sequence order (gaps counted as lost). */
  #flush(out: ReorderResult<T>): void {
    const seqs = [...this.#waiting.keys()].sort((a, b) => seqAfter(this.#expected as number, a) - seqAfter(this.#expected as number, b));
    for (const seq of seqs) {
      const gap = seqAfter(this.#expected as number, seq);
      out.lost += gap;
      this.lost += gap;
      out.packets.push((this.#waiting.get(seq) as { packet: T }).packet);
      this.#expected = (seq + 1) & 0xffff;
    }
    this.#waiting.clear();
    this.#oldestAtMs = Infinity;
  }

  /** ms a packet after a gap waits; the session sizes it by the round trip as it is measured. */
  get latencyMs(): number {
    return this.#latencyMs;
  }

  set latencyMs(ms: number) {
    this.#latencyMs = ms;
  }

  /** The next sequence number to hand on (the first of the gap while one waits); null before the first packet. */
  get next(): number | null {
    return this.#expected;
  }

  /** Packets waiting behind a gap. */
  get waiting(): number {
    return this.#waiting.size;
  }
}
