/**
 * What one control socket may send: two token buckets, bytes and messages, that refill at their
 * sustained rates and hold BURST_S seconds of them (the byte bucket at least one largest message).
 * A message that arrived is always counted (a bucket may go into debt); while either bucket is in
 * debt the session stops reading the socket until it is paid back, so a flooder is slowed by TCP
 * flow control and costs the event loop nothing, and a burst from a reconnecting client passes.
 */

/** Seconds of the sustained rate a quiet socket may send at once. */
export const BURST_S = 5;

export interface InboundLimits {
  /** Bytes a second, sustained. */
  bytesPerS: number;
  /** Messages a second, sustained. */
  messagesPerS: number;
  /** The largest message, bytes: the byte bucket holds at least one. */
  maxMessageBytes: number;
}

export class InboundThrottle {
  readonly #limits: InboundLimits;
  readonly #now: () => number;
  readonly #maxBytes: number;
  readonly #maxMessages: number;
  #bytes: number;
  #messages: number;
  #at: number;

  constructor(limits: InboundLimits, now: () => number = () => performance.now()) {
    this.#limits = limits;
    this.#now = now;
    this.#maxBytes = Math.max(limits.bytesPerS * BURST_S, limits.maxMessageBytes);
    this.#maxMessages = Math.max(1, limits.messagesPerS * BURST_S);
    this.#bytes = this.#maxBytes;
    this.#messages = this.#maxMessages;
    this.#at = now();
  }

  #refill(): void {
    const now = this.#now();
    const s = Math.max(0, now - this.#at) / 1000;
    this.#at = now;
    this.#bytes = Math.min(this.#maxBytes, this.#bytes + s * this.#limits.bytesPerS);
    this.#messages = Math.min(this.#maxMessages, this.#messages + s * this.#limits.messagesPerS);
  }

  /** Counts one message of `bytes`; returns the ms to stop reading for (0: keep reading). */
  take(bytes: number): number {
    this.#refill();
    this.#bytes -= bytes;
    this.#messages -= 1;
    return this.#debtMs();
  }

  /** Ms until both buckets are out of debt (0: now). */
  waitMs(): number {
    this.#refill();
    return this.#debtMs();
  }

  #debtMs(): number {
    const bytes = this.#bytes < 0 ? (-this.#bytes / this.#limits.bytesPerS) * 1000 : 0;
    const messages = this.#messages < 0 ? (-this.#messages / this.#limits.messagesPerS) * 1000 : 0;
    return Math.ceil(Math.max(bytes, messages));
  }
}
