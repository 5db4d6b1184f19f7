/**
 * A stream's one output timeline: the time (ms, the node's monotonic clock) every frame pushed to
 * the encoders carries to WHEP, LL-HLS, clips, recordings and RTMP.
 *
 * Live frames are stamped from their source frame's RTP time (CaptureClock's `ptsMs`: RTP time
 * placed on the node's clock), not from when the node encodes them: a busy event loop, a slow or
 * jittery processor or a burst of access units never changes the intervals between output frames,
 * which are the publisher's own (frames dropped on the way leave a gap of whole frames). Stamping
 * by encode time made them 16–134 ms apart for a 33.3 ms source, and ffmpeg found non-monotonic
 * DTS in clips.
 *
 * The timeline never goes backwards. A run of live frames keeps one offset from RTP time to output
 * time; a new run starts with a new publisher (its own RTP clock), after slate frames, and when RTP
 * time jumps back, at the frame's capture time (CaptureClock's `capturedAt`) or one frame after the
 * last output, whichever is later. Within a run the offset follows the capture time where they
 * drift more than DRIFT_MS apart (a publisher clock that runs slow or fast against ours; a run that
 * had to start late): later by up to EARLY_SLEW_MS a frame (a longer interval is harmless), earlier
 * only across a gap of two frames or more (a dropped frame), by up to LATE_SLEW_MS: shortening every
 * interval would put two frames in one frame period of the nominal rate, where ffmpeg and players
 * that count frames see them collide. Slate frames are stamped by the node: its clock minus the
 * last live frame's lag behind it, at least a frame apart, so the slate follows the live timeline.
 *
 * A run later than its capture time by more than CATCHUP_MS catches up, until it is within
 * CATCHUP_MS (from there the slew above). A source at the nominal rate has no room between its
 * frames: each frame is left out and the run moves a whole frame earlier. A slower source (a
 * diffusion pipeline at 6 fps behind a 30 fps output) moves earlier by the room between its frames
 * and leaves none out: leaving frames out a nominal frame at a time froze a 6 fps stream for 1.3 s
 * to catch up 250 ms, and took a 10-frame params transition's middle steps with it.
 *
 * A run starts that late after a stall of the node's event loop that the slate covered: the
 * slate's frame comes first, stamped at the node's clock, and the frames queued meanwhile
 * follow it. Such a run once stayed 1.8 s late, slewing back 0.9 ms per dropped frame: every output
 * frame after it was stamped ahead of the node's clock, and the LL-HLS packager, which places the
 * audio by the node's clock, saw every audio frame as early and dropped it.
 */

/** Output and capture time may differ this much before the offset follows, ms (more than network jitter). */
const DRIFT_MS = 20;
/** How much later a run's output may move per frame, ms: 3 ms/s at 30 fps, ten times a crystal's drift, invisible in an interval. */
const EARLY_SLEW_MS = 0.1;
/** How much earlier a run's output may move across a gap of two frames or more, ms (intervals stay within 1 ms of whole frames). */
const LATE_SLEW_MS = 0.9;
/** A run later than capture time by more than this leaves frames out to catch up, ms (above a slow pipeline's start behind the slate; under the LL-HLS packager's 200 ms audio tolerance). */
const CATCHUP_MS = 150;

/** The 90 kHz RTP time (32 bits, wrapping) of output time `ptsMs`, counted from `originMs` (both ms on the node's monotonic clock). */
export function rtpTime90k(ptsMs: number, originMs: number): number {
  return Math.round((ptsMs - originMs) * 90) >>> 0;
}

export class OutputClock {
  readonly #frameMs: number;
  /** The last output time given, ms. */
  #lastMs = -Infinity;
  /** RTP time (CaptureClock `ptsMs`) of the last live frame output, ms. */
  #lastMediaMs = -Infinity;
  /** RTP time of the last live frame given, output or left out, ms: the source's own interval. */
  #seenMediaMs = -Infinity;
  /** Output time − RTP time of the current live run, ms; null: the next live frame starts a run. */
  #offsetMs: number | null = null;
  /** How far the last live frame's output time was behind the node's clock when pushed, ms. */
  #lagMs = 0;
  /** How far the last live frame's output time sits after its capture time, ms (up to CATCHUP_MS). */
  #lateMs = 0;

  /** `frameMs`: one nominal output frame, ms: the least gap before a new run's first frame and between slate frames. */
  constructor(frameMs: number) {
    this.#frameMs = frameMs;
  }

  /**
   * How far the output timeline sits after the capture time now, ms: what every output stamps is
   * this much after the moment the frame was captured (a run that started late; it slews back
   * across gaps, or catches up past CATCHUP_MS).
   */
  get lateMs(): number {
    return this.#lateMs;
  }

  /** A new publisher (its own RTP clock): the next live frame starts a run. */
  restart(): void {
    this.#offsetMs = null;
  }

  /**
   * Output time of a live frame: `mediaMs` its RTP time and `captureMs` its capture time (both on
   * the node's monotonic clock, CaptureClock), pushed at `nowMs`; null: the frame is left out (its
   * run is catching up, see CATCHUP_MS).
   */
  live(mediaMs: number, captureMs: number, nowMs: number): number | null {
    const seenMs = this.#seenMediaMs;
    this.#seenMediaMs = mediaMs;
    if (this.#offsetMs !== null) {
      const late = mediaMs + this.#offsetMs - captureMs;
      // A source slower than the nominal rate (a diffusion pipeline's 6 fps against 30) has room
      // between its frames: this frame can come earlier by it and still be a whole frame after the
      // last one out, so the run catches up without leaving a frame out.
      const room = mediaMs - seenMs - this.#frameMs;
      if (late > CATCHUP_MS && mediaMs > this.#lastMediaMs) {
        if (room >= 1) this.#offsetMs -= Math.min(room, late);
        else {
          // The next frame takes this one's place: the interval stays a whole frame.
          this.#offsetMs -= this.#frameMs;
          return null;
        }
      } else if (late < -DRIFT_MS) this.#offsetMs += Math.min(EARLY_SLEW_MS, -late - DRIFT_MS);
      else if (late > DRIFT_MS && mediaMs - this.#lastMediaMs >= 2 * this.#frameMs) this.#offsetMs -= Math.min(LATE_SLEW_MS, late - DRIFT_MS);
    }
    let pts = this.#offsetMs === null ? -Infinity : mediaMs + this.#offsetMs;
    if (!(pts > this.#lastMs)) {
      pts = Math.max(captureMs, this.#lastMs + this.#frameMs);
      this.#offsetMs = pts - mediaMs;
    }
    this.#lagMs = nowMs - pts;
    this.#lateMs = pts - captureMs;
    this.#lastMs = pts;
    this.#lastMediaMs = mediaMs;
    return pts;
  }

  /**
   * The output time a live frame would get if it were pushed now (`live` without its slews and
   * catch-up, and without moving anything): where a viewer will see it on the output timeline, for
   * changes and audio that must land on the frame a viewer sees at their time.
   */
  predict(mediaMs: number, captureMs: number): number {
    const pts = this.#offsetMs === null ? -Infinity : mediaMs + this.#offsetMs;
    return pts > this.#lastMs ? pts : Math.max(captureMs, this.#lastMs + this.#frameMs);
  }

  /** Output time of a slate frame pushed at `nowMs` (the node's monotonic clock, ms); the next live frame starts a run. */
  slate(nowMs: number): number {
    this.#offsetMs = null;
    // Ticks that come late or together still advance by a whole output frame: players and ffmpeg
    // count in frames of the nominal rate, where two frames less than one apart can collide.
    const pts = Math.max(this.#lastMs + this.#frameMs, nowMs - this.#lagMs);
    this.#lastMs = pts;
    return pts;
  }
}
