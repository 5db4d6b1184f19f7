/**
 * A stream's timed param changes, held on the media node so that a change lands on a frame, not
 * on a timer: the live path asks, before it processes each frame, which changes are due at that
 * frame's capture time (`take`), applies them to that frame, and reports the frame they landed on.
 * Transitions step here too, one step per processed frame, so "over N frames" means N output
 * frames. Pure bookkeeping: no timers, no I/O (LiveStream owns both).
 */
import type { LiveParams } from './FrameProcessor.ts';

/** Blend of the prompt (and seed) from the value at the start frame to the new one. */
export interface ParamsTransition {
  /** Frames, 1–120: step i of N sets the weight i/N on the new value; step N sets it alone. */
  steps: number;
  method: 'linear' | 'slerp';
}

export interface ScheduledParams {
  /** The sender's id, echoed in its landing (unique per stream while it waits). */
  id: string;
  /** The keys to set (hot changes: only those; a reload: the full params). */
  params: LiveParams;
  /** ms since the epoch: lands on the first frame captured at or after it; null = the next frame. */
  applyAt: number | null;
  transition?: ParamsTransition | undefined;
}

/** Where a change landed: `applied` (the change, or step 1 of its transition), `done` (last step). */
export interface ParamsMark {
  id: string;
  kind: 'applied' | 'done';
  /** The node could not apply it (it kept the previous params). */
  error: string | null;
  /** ms since the epoch when the node applied it. */
  appliedAt: number;
}

interface Running {
  id: string;
  steps: number;
  method: 'linear' | 'slerp';
  /** The step the next frame gets (1-based). */
  next: number;
  from: { prompt?: string; seed?: number };
  to: { prompt?: string; seed?: number };
  /** Interpolation methods before the transition, restored by its last step. */
  restore: LiveParams;
}

export interface Due {
  /** Patches to apply, in order, before the frame. */
  patches: LiveParams[];
  marks: Omit<ParamsMark, 'error' | 'appliedAt'>[];
}

const round6 = (w: number) => Math.round(w * 1e6) / 1e6;

export class ParamsSchedule {
  /** Soonest first; `applyAt` null sorts first (−∞). */
  #waiting: ScheduledParams[] = [];
  #running: Running | null = null;

  get size(): number {
    return this.#waiting.length;
  }

  /** True while a transition has steps left. */
  get transitioning(): boolean {
    return this.#running !== null;
  }

  add(s: ScheduledParams): void {
    this.#waiting = this.#waiting.filter((w) => w.id !== s.id);
    const at = s.applyAt ?? -Infinity;
    const i = this.#waiting.findIndex((w) => (w.applyAt ?? -Infinity) > at);
    if (i < 0) this.#waiting.push(s);
    else this.#waiting.splice(i, 0, s);
  }

  /** False when nothing waits by that id. */
  cancel(id: string): boolean {
    const n = this.#waiting.length;
    this.#waiting = this.#waiting.filter((w) => w.id !== id);
    return this.#waiting.length !== n;
  }

  /** ms since the epoch of the soonest waiting change (−∞ for "the next frame"); null when none. */
  nextDue(): number | null {
    const first = this.#waiting[0];
    return first ? (first.applyAt ?? -Infinity) : null;
  }

  /**
   * A direct update (PATCH) set these keys: a transition of the prompt or seed stops where it is,
   * since the direct value is newer than its target.
   */
  interrupt(keys: string[]): void {
    if (this.#running && keys.some((k) => k === 'prompt' || k === 'seed')) this.#running = null;
  }

  /**
   * What a frame captured at `frameAt` (ms epoch) gets: the next step of a running transition,
   * then every change due at or before `frameAt`, in time order. `current` is the stream's params
   * now (a transition blends from them). A change that arrives while a transition runs finishes
   * it first (its target applies at once), then applies: the newer change wins.
   */
  take(frameAt: number, current: LiveParams): Due {
    const due: ScheduledParams[] = [];
    while (this.#waiting.length > 0 && (this.#waiting[0]!.applyAt ?? -Infinity) <= frameAt) due.push(this.#waiting.shift()!);
    const patches: LiveParams[] = [];
    const marks: Due['marks'] = [];
    const run = this.#running;
    if (run && due.length > 0) {
      patches.push(this.#step(run, run.steps));
      marks.push({ id: run.id, kind: 'done' });
      this.#running = null;
    } else if (run) {
      patches.push(this.#step(run, run.next));
      if (run.next >= run.steps) {
        marks.push({ id: run.id, kind: 'done' });
        this.#running = null;
      } else run.next++;
    }
    let params = { ...current };
    for (const s of due) {
      const patch = this.#start(s, params);
      patches.push(patch);
      params = { ...params, ...patch };
      marks.push({ id: s.id, kind: 'applied' });
      if (s.transition && this.#running?.id === s.id && this.#running.steps <= 1) {
        marks.push({ id: s.id, kind: 'done' });
        this.#running = null;
      }
    }
    return { patches, marks };
  }

  /**
   * Everything due at or before `now`, when no frame will come to take it (no publisher): the
   * changes apply at once and transitions jump to their end.
   */
  flush(now: number): Due {
    const due: Due = { patches: [], marks: [] };
    if (this.#running) {
      due.patches.push(this.#step(this.#running, this.#running.steps));
      due.marks.push({ id: this.#running.id, kind: 'done' });
      this.#running = null;
    }
    while (this.#waiting.length > 0 && (this.#waiting[0]!.applyAt ?? -Infinity) <= now) {
      const s = this.#waiting.shift()!;
      due.patches.push(s.params);
      due.marks.push({ id: s.id, kind: 'applied' });
      if (s.transition) due.marks.push({ id: s.id, kind: 'done' });
    }
    return due;
  }

  clear(): void {
    this.#waiting = [];
    this.#running = null;
  }

  /** The patch of a change's first frame (step 1 of its transition, or the change itself). */
  #start(s: ScheduledParams, current: LiveParams): LiveParams {
    if (!s.transition) return s.params;
    const { prompt, seed, ...rest } = s.params;
    const from: Running['from'] = {};
    const to: Running['to'] = {};
    // Only a single value blends; a weighted list on either side jumps (the api refuses those).
    if (typeof prompt === 'string' && typeof current['prompt'] === 'string') {
      from.prompt = current['prompt'];
      to.prompt = prompt;
    }
    if (typeof seed === 'number' && typeof current['seed'] === 'number') {
      from.seed = current['seed'];
      to.seed = seed;
    }
    const jump: LiveParams = { ...rest };
    if (prompt !== undefined && to.prompt === undefined) jump['prompt'] = prompt;
    if (seed !== undefined && to.seed === undefined) jump['seed'] = seed;
    if (to.prompt === undefined && to.seed === undefined) return s.params;
    const restore: LiveParams = {};
    if (to.prompt !== undefined && current['prompt_interpolation_method'] !== undefined) restore['prompt_interpolation_method'] = current['prompt_interpolation_method'];
    if (to.seed !== undefined && current['seed_interpolation_method'] !== undefined) restore['seed_interpolation_method'] = current['seed_interpolation_method'];
    const run: Running = { id: s.id, steps: s.transition.steps, method: s.transition.method, next: 2, from, to, restore };
    this.#running = run;
    return { ...jump, ...this.#step(run, 1) };
  }

  /** Step i of N: weight i/N on the new value; step N sets the new value alone. */
  #step(run: Running, i: number): LiveParams {
    const last = i >= run.steps;
    const w = round6(i / run.steps);
    const p: LiveParams = {};
    if (run.to.prompt !== undefined) {
      // `from` is set with `to` (#start); the fallback only satisfies the type.
      p['prompt'] = last ? run.to.prompt : [[run.from.prompt ?? run.to.prompt, round6(1 - w)], [run.to.prompt, w]];
      p['prompt_interpolation_method'] = last ? (run.restore['prompt_interpolation_method'] ?? run.method) : run.method;
    }
    if (run.to.seed !== undefined) {
      p['seed'] = last ? run.to.seed : [[run.from.seed ?? run.to.seed, round6(1 - w)], [run.to.seed, w]];
      p['seed_interpolation_method'] = last ? (run.restore['seed_interpolation_method'] ?? run.method) : run.method;
    }
    return p;
  }
}
