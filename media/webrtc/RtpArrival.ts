/**
 * A publisher's RTP time placed on the node's clock: each packet's (arrival − RTP time) enters a
 * window of the last `windowMs`, and the least of them — the least-delayed recent packet — maps
 * RTP time to the node's clock. It does not move when this process reads one packet late (a busy
 * event loop); the window follows a sender whose clock drifts. RTP timestamps are unwrapped
 * (32 bits wrap every 13 h at 90 kHz, 25 h at 48 kHz). Used for video frames (CaptureClock) and
 * audio packets (AudioMappings).
 */
/** `a − b` for two 32-bit RTP timestamps (or sequence numbers' like), across a wrap: the signed distance, in ticks. */
export function rtpDelta(a: number, b: number): number {
  return (a - b) | 0;
}

/** How many 16-bit RTP sequence numbers `to` lies after `from`, across a wrap (negative: before it). */
export function seqAfter(from: number, to: number): number {
  return ((((to - from) & 0xffff) + 0x8000) & 0xffff) - 0x8000;
}

export class RtpArrival {
  readonly #clockRate: number;
  readonly #windowMs: number;
  /** (arrival − RTP time) of the window, ms, as a monotonic queue whose head is the least. */
  #offsets: { at: number; offset: number }[] = [];
  /** The last RTP timestamp and the unwrapped value so far (in RTP units). */
  #rtpLast: number | null = null;
  #rtpUnwrapped = 0;

  /** `clockRate`: RTP ticks per second (90 000 video, 48 000 Opus); `windowMs`: how far back the least delay is taken. */
  constructor(clockRate: number, windowMs: number) {
    this.#clockRate = clockRate;
    this.#windowMs = windowMs;
  }

  /** A new sender: it has its own RTP clock. */
  reset(): void {
    this.#offsets = [];
    this.#rtpLast = null;
  }

  /** A packet with RTP timestamp `rtpTs` arrived at `now` (ms on the caller's clock): its unwrapped RTP time, ms. */
  arrive(rtpTs: number, now: number): number {
    if (this.#rtpLast === null) this.#rtpUnwrapped = rtpTs;
    else this.#rtpUnwrapped += rtpDelta(rtpTs, this.#rtpLast);
    this.#rtpLast = rtpTs;
    const rtpMs = (this.#rtpUnwrapped * 1000) / this.#clockRate;
    const q = this.#offsets;
    const offset = now - rtpMs;
    while (q.length > 0 && q[q.length - 1]!.offset >= offset) q.pop();
    q.push({ at: now, offset });
    while (q[0]!.at < now - this.#windowMs) q.shift();
    return rtpMs;
  }

  /** The least (arrival − RTP time) in the window, ms on the caller's clock; undefined before a packet. */
  get least(): number | undefined {
    return this.#offsets[0]?.offset;
  }
}
