/**
 * What the node does with a stream whose publisher and WHEP viewers are all gone, once the stream
 * says so (its `idle` event, `idleStreamMs` after the last of them left):
 *
 * - nothing consumes its output → released at once (closed on the node);
 * - LL-HLS players (a request in the last 30 s) or an RTMP push still consume it → held: its
 *   outputs carry the slate until the publisher is back. Checked every `checkMs`; released as soon
 *   as nothing consumes it, and in any case `maxMs` after the hold began, so a player left open on
 *   a stream whose publisher never returns does not keep a slate encoding for ever.
 *
 * A publisher or WHEP viewer that comes back ends the hold without releasing: the stream re-arms
 * its own idle timer when they leave, and the next `idle` starts a fresh hold.
 */
import type { Logger } from 'pino';

/** The part of a LiveStream the hold reads. */
export interface AwayHoldable {
  readonly streamId: string;
  readonly state: string;
  readonly publisher: unknown;
  /** Its readers: one that holds the stream (a WHEP viewer, connected or not) ends the hold. */
  readonly readers: { readonly holds: boolean };
  /** An HLS player requested something lately, or an RTMP push runs. */
  readonly outputConsumed: boolean;
}

export interface AwayHoldOptions {
  /** ms a hold lasts at most. */
  maxMs: number;
  /** ms between checks while held. */
  checkMs: number;
  /** Closes the stream on the node. */
  release(): void;
  logger: Logger;
}

export class AwayHold {
  readonly #stream: AwayHoldable;
  readonly #o: AwayHoldOptions;
  #timer: NodeJS.Timeout | undefined;
  /** performance.now() when the current hold began; null when not held. */
  #since: number | null = null;

  constructor(stream: AwayHoldable, opts: AwayHoldOptions) {
    this.#stream = stream;
    this.#o = opts;
  }

  /** Whether the stream is being held past its idle time for HLS players or RTMP pushes. */
  get held(): boolean {
    return this.#since !== null;
  }

  /** The stream went idle: release it, or hold it while its output is consumed. */
  onIdle(): void {
    this.cancel();
    if (!this.#stream.outputConsumed) {
      this.#o.release();
      return;
    }
    this.#since = performance.now();
    this.#o.logger.info(`onIdle() | held for its HLS players or RTMP pushes [streamId:${this.#stream.streamId}] [maxMs:${this.#o.maxMs}]`);
    this.#timer = setInterval(() => this.#check(), this.#o.checkMs);
  }

  /** Stops holding without releasing (the stream closed, or the node is closing). */
  cancel(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#since = null;
  }

  #check(): void {
    const s = this.#stream;
    if (s.state === 'closed' || s.publisher !== null || s.readers.holds) {
      this.cancel();
      return;
    }
    const heldMs = performance.now() - (this.#since ?? 0);
    if (s.outputConsumed && heldMs < this.#o.maxMs) return;
    this.#o.logger.info(`check() | released [streamId:${s.streamId}] [reason:${s.outputConsumed ? 'hold limit' : 'no consumer'}] [heldMs:${Math.round(heldMs)}]`);
    this.cancel();
    this.#o.release();
  }
}
