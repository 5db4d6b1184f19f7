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
 * It also holds the capture times of the frames inside the decoder by the stamp each push got
 * (DecoderBin.push), so a decoded frame gets the time of the very frame it was decoded from. (Matched
 * by order instead, every frame a leaky decoder queue dropped shifted the match by one frame for good:
 * outputs were stamped up to half a second early.)
 */

import { RtpArrival } from '../webrtc/RtpArrival.ts';

/** How far back the least-delayed frame that places RTP time on the node's clock may be, ms. */
const CAPTURE_WINDOW_MS = 2000;
/** A decoder holds a few frames at most: older entries are frames it dropped (the newest are kept). */
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
  /** Capture times of the frames inside the decoder by their push stamp, oldest first. */
  #inputTimes = new Map<number, CaptureTime>();
  /** RTP time (90 kHz) on performance.now() by the least-delayed frame of the last CAPTURE_WINDOW_MS. */
  readonly #arrival = new RtpArrival(90_000, CAPTURE_WINDOW_MS);
  /** The fixed (arrival − RTP time) `ptsMs` uses, ms; null before the publisher's first frame. */
  #steady: number | null = null;

  /** A new publisher: it has its own RTP clock. */
  reset(): void {
    this.#arrival.reset();
    this.#steady = null;
    this.#inputTimes.clear();
  }

  /** A frame with RTP timestamp `rtpTs` (90 kHz) went into the decoder with push stamp `stamp`. */
  frameIn(rtpTs: number, stamp: number): void {
    const time = this.#captureAt(rtpTs);
    if (stamp < 0) return; // refused by the decoder: no frame will come of it
    this.#inputTimes.set(stamp, time);
    // Frames the decoder dropped never come out: the oldest entries go (a Map iterates in insertion order).
    for (const old of this.#inputTimes.keys()) {
      if (this.#inputTimes.size <= MAX_IN_DECODER) break;
      this.#inputTimes.delete(old);
    }
  }

  /** The decoder emitted the frame pushed with `stamp`: its capture time (now when unknown). */
  frameOut(stamp: number): CaptureTime {
    const time = this.#inputTimes.get(stamp);
    if (time === undefined) return { capturedAt: Date.now(), ptsMs: performance.now() };
    this.#inputTimes.delete(stamp);
    return time;
  }

  /** The decoder went, with the frames inside it. */
  decoderReset(): void {
    this.#inputTimes.clear();
  }

  #captureAt(rtpTs: number): CaptureTime {
    const now = performance.now();
    const rtpMs = this.#arrival.arrive(rtpTs, now);
    const least = this.#arrival.least as number; // a frame just arrived
    if (this.#steady === null || Math.abs(least - this.#steady) > STEADY_RESET_MS) this.#steady = least;
    return { capturedAt: rtpMs + least + (Date.now() - now), ptsMs: rtpMs + this.#steady };
  }
}
