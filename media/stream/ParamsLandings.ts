/**
 * Lands a stream's scheduled params changes on frames. ParamsSchedule holds the changes and says
 * which are due by a time; this object ties it to the frame path and the clock:
 *
 * - before a frame captured at T is processed (or, with nothing to process, encoded), what is due
 *   by T applies, and the frame carries those landings;
 * - a frame the processor gave no output for hands its landings to the next output frame;
 * - a landing is reported (`landed`) when the H.264 encoder's access unit for its frame comes out,
 *   with that frame's number, capture time and RTP timestamp;
 * - with no frames flowing (no publisher, or a frame path stalled LANDING_FALLBACK_MS), one timer
 *   applies due changes at their time without a frame.
 */
import type { Logger } from 'pino';
import type { LiveParams } from './FrameProcessor.ts';
import { ParamsSchedule, type ParamsMark, type ScheduledParams } from './ParamsSchedule.ts';

/** Where a scheduled change landed. */
export interface ParamsLanding extends ParamsMark {
  streamId: string;
  /** The output frame (framesOut numbering) that first carries it; null when no frame was flowing. */
  frame: number | null;
  /**
   * Capture time of that frame, ms since the epoch: the publisher's RTP timestamp placed on the
   * node's clock by the least-delayed frame of the session (see CaptureClock).
   */
  frameAt: number | null;
  /** Capture time of the frame processed before it (the change was not due yet then), ms epoch. */
  prevFrameAt: number | null;
  /** The RTP timestamp (90 kHz) of that output frame as H.264 viewers receive it. */
  rtpTimestamp: number | null;
}

/**
 * When a due change is given up on waiting for a frame while frames flow, ms (a frame path that
 * stalled this long is not flowing; the change then applies without one).
 */
const LANDING_FALLBACK_MS = 1000;

export interface ParamsLandingsOptions {
  streamId: string;
  /** The stream's params now (a transition interpolates from them). */
  params: () => LiveParams;
  /** Applies a due change to the stream now; throws when the engine refuses it. */
  apply: (patch: LiveParams) => void;
  /** A publisher is attached (frames may flow). */
  publishing: () => boolean;
  landed: (landing: ParamsLanding) => void;
  /** The engine refused a due change (the stream's lastError). */
  onError: (message: string) => void;
  logger: Logger;
}

export class ParamsLandings {
  readonly #opts: ParamsLandingsOptions;
  /** Timed changes waiting for their frame, and the running transition. */
  readonly #schedule = new ParamsSchedule();
  #timer: NodeJS.Timeout | undefined;
  /** Capture time of the last frame the frame path took (ms epoch), and when it did (Date.now()). */
  #lastFrameAt: number | null = null;
  #lastFrameSeenAt = 0;
  /** Landings that wait for a frame to reach the encoder (the processor dropped theirs). */
  #carry: ParamsMark[] = [];
  /** Live frames in the H.264 encoder with landings waiting for their access unit, oldest first, by the PTS their push returned. */
  #auMarks: { pts: number; marks: ParamsMark[]; frameAt: number | null; prevFrameAt: number | null }[] = [];
  /** prevFrameAt of a frame's landings, keyed by their array (set by atFrame, read by pushed). */
  readonly #prevFrameAt = new WeakMap<ParamsMark[], number | null>();
  #closed = false;

  constructor(opts: ParamsLandingsOptions) {
    this.#opts = opts;
  }

  /** Holds a change until its time (see LiveStream.scheduleParams). */
  add(s: ScheduledParams): void {
    this.#schedule.add(s);
    this.#arm();
  }

  /** Drops a waiting change; false when none waits by that id. */
  cancel(id: string): boolean {
    const had = this.#schedule.cancel(id);
    this.#arm();
    return had;
  }

  /** A direct update of these keys: it is newer than a running transition of them, which stops. */
  interrupt(keys: string[]): void {
    this.#schedule.interrupt(keys);
  }

  /**
   * The frame path's hook, before a frame captured at `capturedAt` (ms epoch) is processed (or,
   * with nothing to process, encoded): applies what is due by then and returns the landings the
   * frame carries (with those a dropped frame left).
   */
  atFrame(capturedAt: number): ParamsMark[] {
    const prev = this.#lastFrameAt;
    this.#lastFrameAt = capturedAt;
    this.#lastFrameSeenAt = Date.now();
    const carried = this.#carry;
    this.#carry = [];
    if (this.#schedule.size === 0 && !this.#schedule.transitioning) {
      if (carried.length > 0) this.#prevFrameAt.set(carried, prev);
      return carried;
    }
    const marks = [...carried, ...this.#applyDue(this.#schedule.take(capturedAt, this.#opts.params()))];
    this.#prevFrameAt.set(marks, prev);
    this.#arm();
    return marks;
  }

  /** A frame gave no output (dropped by the processor): the next output frame carries its landings. */
  noOutput(marks: ParamsMark[]): void {
    this.#carry.push(...marks);
  }

  /**
   * A live frame carrying `marks` was pushed to the H.264 encoder, which gave it `pts` (strictly
   * increasing; -1: the encoder refused it, and the next frame carries its landings).
   */
  pushed(marks: ParamsMark[], pts: number): void {
    if (marks.length === 0) return;
    if (pts < 0) {
      this.#carry.push(...marks);
      return;
    }
    this.#auMarks.push({ pts, marks, frameAt: this.#lastFrameAt, prevFrameAt: this.#prevFrameAt.get(marks) ?? null });
  }

  /**
   * The access unit of the frame pushed with `pts` came out: live output frame `n`, at RTP time
   * `rtpTimestamp`. Its landings name it, and so do those of older frames that never came out
   * (dropped by the encoder's leaky input under overload: this is the first frame carrying them).
   * Exact, whatever was dropped: each access unit says which push it encodes.
   */
  accessUnit(pts: number, n: number, rtpTimestamp: number): void {
    while (this.#auMarks.length > 0 && this.#auMarks[0]!.pts <= pts) {
      const q = this.#auMarks.shift()!;
      for (const m of q.marks) this.#land(m, n, q.frameAt, q.prevFrameAt, rtpTimestamp);
    }
  }

  #applyDue(due: ReturnType<ParamsSchedule['take']>): ParamsMark[] {
    let error: string | null = null;
    for (const patch of due.patches) {
      try {
        this.#opts.apply(patch);
      } catch (err) {
        error = `params update failed: ${(err as Error).message}`;
        this.#opts.onError(error);
        this.#opts.logger.warn({ err }, `applyDue() | the engine refused a scheduled change [streamId:${this.#opts.streamId}]`);
      }
    }
    const appliedAt = Date.now();
    return due.marks.map((m) => ({ ...m, error, appliedAt }));
  }

  #flowing(now: number): boolean {
    return this.#opts.publishing() && now - this.#lastFrameSeenAt < LANDING_FALLBACK_MS;
  }

  /** One timer for the soonest change: when frames flow it only catches a frame path that stalled. */
  #arm(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#closed) return;
    const next = this.#schedule.nextDue();
    if (next === null && !this.#schedule.transitioning) return;
    const now = Date.now();
    const at = Math.max(next ?? now, this.#lastFrameSeenAt) + (this.#flowing(now) ? LANDING_FALLBACK_MS : 0);
    this.#timer = setTimeout(() => this.#onTimer(), Math.max(0, Math.min(at - now, 2 ** 31 - 1)));
    this.#timer.unref?.();
  }

  #onTimer(): void {
    if (this.#closed) return;
    const now = Date.now();
    if (!this.#flowing(now)) {
      for (const m of this.#applyDue(this.#schedule.flush(now))) this.#land(m, null, null, null, null);
    }
    this.#arm();
  }

  #land(m: ParamsMark, frame: number | null, frameAt: number | null, prevFrameAt: number | null, rtpTimestamp: number | null): void {
    this.#opts.landed({ ...m, streamId: this.#opts.streamId, frame, frameAt, prevFrameAt, rtpTimestamp });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#schedule.clear();
  }
}
