/**
 * Places a publisher's frames on the node's clock: a frame's capture time (ms epoch) is its RTP
 * timestamp plus the least (arrival − RTP time) of the last CAPTURE_WINDOW_MS, i.e. the publisher's
 * own pacing placed at the arrival of its least-delayed recent frame. Unlike the arrival time it
 * does not move when this process reads one packet late (a busy event loop), so timed params
 * changes land by capture, not by jitter; the window follows a publisher whose clock drifts or
 * falls behind (a starved sender whose RTP time runs ahead of its sending).
 *
 * Output frames are stamped from a fixed copy of the same mapping (`ptsMs`, on the node's
 * monotonic clock): the window's least delay moves by a few ms as frames arrive, which must not
 * show in the intervals between output frames, so `ptsMs` is the RTP time plus the offset of the
 * publisher's first frame: exactly the publisher's intervals. The output clock (OutputClock) keeps
 * the output near `capturedAt` against drift; the offset is taken again only when RTP time jumped
 * (STEADY_RESET_MS from the window's: a publisher that restarted its clock).
 *
 * It also holds the capture times of the frames inside the decoder, oldest first (the decoder
 * emits in order), so a decoded frame gets the time of the frame that went in.
 */

/** How far back the least-delayed frame that places RTP time on the node's clock may be, ms. */
const CAPTURE_WINDOW_MS = 2000;
/** A decoder holds a few frames at most: more means it dropped some (the newest are kept). */
const MAX_IN_DECODER = 16;
/** Further apart than this the fixed offset is taken again from the window's (a publisher whose RTP time jumped), ms. */
const STEADY_RESET_MS = 1000;

/** When a frame was captured, on two clocks. */
export interface CaptureTime {
  /** Capture time, ms epoch (params landings are timed in epoch ms). */
  capturedAt: number;
  /** RTP time on the node's monotonic clock (performance.now()) by the publisher's first frame, ms: the publisher's own intervals. */
  ptsMs: number;
}

export class CaptureClock {
  /** Capture times of the frames inside the decoder, oldest first. */
  #inputTimes: CaptureTime[] = [];
  /**
   * (arrival − RTP time) of the last CAPTURE_WINDOW_MS of frames, ms on performance.now(), as a
   * monotonic queue whose head is the least: maps RTP time to the node's clock.
   */
  #offsets: { at: number; offset: number }[] = [];
  /** The fixed (arrival − RTP time) `ptsMs` uses, ms; null before the publisher's first frame. */
  #steady: number | null = null;
  /** The last RTP timestamp and its unwrapped value, ms (32-bit RTP time wraps every 13 h). */
  #rtpLast: number | null = null;
  #rtpUnwrapped = 0;

  /** A new publisher: it has its own RTP clock. */
  reset(): void {
    this.#offsets = [];
    this.#steady = null;
    this.#rtpLast = null;
    this.#inputTimes = [];
  }

  /** A frame with RTP timestamp `rtpTs` (90 kHz) went into the decoder. */
  frameIn(rtpTs: number): void {
    this.#inputTimes.push(this.#captureAt(rtpTs));
    if (this.#inputTimes.length > MAX_IN_DECODER) this.#inputTimes.splice(0, this.#inputTimes.length - MAX_IN_DECODER);
  }

  /** The decoder emitted a frame: the capture time of the oldest frame inside it (now when unknown). */
  frameOut(): CaptureTime {
    return this.#inputTimes.shift() ?? { capturedAt: Date.now(), ptsMs: performance.now() };
  }

  /** The decoder went, with the frames inside it. */
  decoderReset(): void {
    this.#inputTimes = [];
  }

  #captureAt(rtpTs: number): CaptureTime {
    if (this.#rtpLast === null) this.#rtpUnwrapped = rtpTs;
    else this.#rtpUnwrapped += ((rtpTs - this.#rtpLast + 2 ** 31) % 2 ** 32) - 2 ** 31;
    this.#rtpLast = rtpTs;
    const rtpMs = this.#rtpUnwrapped / 90;
    const now = performance.now();
    const q = this.#offsets;
    const offset = now - rtpMs;
    while (q.length > 0 && q[q.length - 1]!.offset >= offset) q.pop();
    q.push({ at: now, offset });
    while (q[0]!.at < now - CAPTURE_WINDOW_MS) q.shift();
    const least = q[0]!.offset;
    if (this.#steady === null || Math.abs(least - this.#steady) > STEADY_RESET_MS) this.#steady = least;
    return { capturedAt: rtpMs + least + (Date.now() - now), ptsMs: rtpMs + this.#steady };
  }
}
