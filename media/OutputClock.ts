/**
 * A stream's one output timeline: the time (ms, the node's monotonic clock) every frame pushed to
 * the encoders carries to WHEP, LL-HLS, clips, recordings and RTMP.
 *
 * Live frames are stamped from their capture time (the publisher's RTP time placed on the node's
 * clock, CaptureClock), not from when the node encodes them: a busy event loop, a slow or jittery
 * processor or a burst of access units never changes the intervals between output frames, which
 * are the publisher's own (frames dropped on the way leave a gap of whole frames). Stamping by
 * encode time made them 16–134 ms apart for a 33.3 ms source, and ffmpeg found non-monotonic DTS
 * in clips.
 *
 * The timeline never goes backwards. A run of live frames keeps one offset from capture time to
 * output time; a new run starts with a new publisher (its own RTP clock), after slate frames, and
 * when capture time jumps back, with the offset chosen so it continues after the last output
 * (0 when the capture time is already past it). Slate frames are stamped by the node: its clock
 * minus the last live frame's lag behind it, so the slate follows the live timeline at its pace.
 */
export class OutputClock {
  readonly #frameMs: number;
  /** The last output time given, ms. */
  #lastMs = -Infinity;
  /** Output time − capture time of the current live run, ms; null: the next live frame starts a run. */
  #offsetMs: number | null = null;
  /** How far the last live frame's output time was behind the node's clock when pushed, ms. */
  #lagMs = 0;

  /** `frameMs`: the gap left before a new run's first frame (one nominal output frame), ms. */
  constructor(frameMs: number) {
    this.#frameMs = frameMs;
  }

  /** A new publisher (its own capture clock): the next live frame starts a run. */
  restart(): void {
    this.#offsetMs = null;
  }

  /** Output time of a live frame captured at `captureMs`, pushed at `nowMs` (both the node's monotonic clock, ms). */
  live(captureMs: number, nowMs: number): number {
    let pts = this.#offsetMs === null ? -Infinity : captureMs + this.#offsetMs;
    if (!(pts > this.#lastMs)) {
      this.#offsetMs = Math.max(0, this.#lastMs + this.#frameMs - captureMs);
      pts = captureMs + this.#offsetMs;
    }
    this.#lagMs = nowMs - pts;
    this.#lastMs = pts;
    return pts;
  }

  /** Output time of a slate frame pushed at `nowMs` (the node's monotonic clock, ms); the next live frame starts a run. */
  slate(nowMs: number): number {
    this.#offsetMs = null;
    // Ticks that come late or together still advance by at least a millisecond.
    const pts = Math.max(this.#lastMs + 1, nowMs - this.#lagMs);
    this.#lastMs = pts;
    return pts;
  }
}
