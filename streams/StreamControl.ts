/**
 * Live control of running streams, for the per-stream WebSocket (control/routes/control.ts):
 * partial param updates applied now, at a time (`at`), or on the stream's beat (`on_beat`, with a
 * tempo set by the client or taken from one of our songs), optionally as a `transition` that blends
 * the prompt (and seed) from the current value to the new one over N frames.
 *
 * Every update goes through StreamService.update, so validation, censoring and the hot/reload
 * rules are PATCH's own; each client message counts once against PATCH's rate limit (the steps of
 * a transition do not). Scheduling happens here, on the api process, with one timer per change:
 * the change reaches the node within a timer tick of its time (docs/control.md measures it), and
 * the node applies a hot change to the next frame it processes.
 *
 * Scheduled changes live in this process only: a restart of the api process drops them (the
 * client sees its socket close and sends them again).
 */
import type { Logger } from 'pino';
import type { SongService } from '../songs/index.ts';
import type { Account } from '../store/index.ts';
import { CONTROL_TOKEN_TTL_S } from './ControlTokens.ts';
import { ApiError, streamError } from '../errors/index.ts';
import type { ParamsInput } from './StreamParams.ts';
import type { StreamService } from './StreamService.ts';

/** Limits of the control channel (also shown by GET /v1/capabilities). */
export const CONTROL_LIMITS = {
  tokenTtlSeconds: CONTROL_TOKEN_TTL_S,
  /** Frames a transition may span (4 s at 30 fps). */
  maxTransitionSteps: 120,
  /** How far ahead a change may be scheduled, ms (10 minutes: a show's next cue, not tomorrow). */
  maxAheadMs: 600_000,
  /** Changes waiting at once per stream. */
  maxScheduled: 64,
  /** Frame interval assumed for transitions while the stream reports no output rate, fps. */
  defaultFps: 30,
  /** A time this close to now (ms) or in the past applies at once. */
  immediateMs: 1,
} as const;

/**
 * The stream's musical clock: beat n falls at `phase + n × 60000 / bpm` (ms since the epoch, on
 * the server's clock: clients align with `ping`'s `server_time`).
 */
export interface Tempo {
  bpm: number;
  /** ms since the epoch of a downbeat (beat 0 of a bar). */
  phase: number;
  /** Beats in a bar (`on_beat: { every: 'bar' }` waits for the next downbeat). Default 4. */
  beatsPerBar: number;
  /** The song the tempo was taken from, if any. */
  songId: string | null;
}

export interface TempoInput {
  bpm?: number | undefined;
  phase?: number | undefined;
  beats_per_bar?: number | undefined;
  tempo_from_song?: string | undefined;
}

/**
 * - `linear`: weights move linearly from the old value to the new one (prompt embeddings or seed
 *   noise are mixed linearly by the engine);
 * - `slerp`: the engine interpolates spherically (smoother for prompts; the spec's advice).
 */
export type TransitionMethod = 'linear' | 'slerp';

export interface UpdateRequest {
  /** The client's id for this update, echoed in its ack (generated when absent). */
  id: string;
  params: ParamsInput;
  /** ms since the epoch. */
  at?: number | undefined;
  /** Apply on the next beat (every = 1), every n-th beat counted from the phase, or on the next bar. */
  onBeat?: { every: number | 'bar' } | undefined;
  /** Inline tempo for this update (also becomes the stream's tempo). */
  tempo?: TempoInput | undefined;
  transition?: { steps: number; method: TransitionMethod } | undefined;
}

export interface UpdateAck {
  id: string;
  /** What StreamService did: hot (next frame), reload (pipeline rebuilt in the background) or none (nothing changed). */
  mode: 'none' | 'hot' | 'reload';
  hot: string[];
  reload: string[];
  censored: boolean;
  /** The node could not apply it (it keeps serving the previous params). */
  node_error: string | null;
  /** When it was due, ms since the epoch (null when it applied on arrival). */
  due_at: number | null;
  /** When the node took it, ms since the epoch. */
  applied_at: number;
  /**
   * The node's output frame count when it took the change, plus one: the first output frame that
   * can carry a hot change (frames already inside the pipeline may still show the old params).
   * Null when the stream has no live output.
   */
  frame: number | null;
  transition: { steps: number; method: TransitionMethod; frame_ms: number; ends_at: number } | null;
}

export interface ScheduledView {
  id: string;
  /** ms since the epoch. */
  due_at: number;
  on_beat: boolean;
  /** The params the change sets. */
  keys: string[];
  transition: { steps: number; method: TransitionMethod } | null;
}

/** What the control object tells the sockets of a stream. */
export type ControlEvent =
  | { type: 'applied'; ack: UpdateAck }
  | { type: 'failed'; id: string; error: ApiError }
  | { type: 'scheduled'; scheduled: ScheduledView[] }
  | { type: 'transition_done'; id: string; at: number }
  | { type: 'tempo'; tempo: Tempo };

interface Pending {
  view: ScheduledView;
  timer: NodeJS.Timeout;
  account: Account;
  req: UpdateRequest;
}

export interface StreamControlOptions {
  streams: StreamService;
  songs?: SongService | undefined;
  logger: Logger;
  now?: () => number;
}

const invalid = (field: string, message: string) => streamError('REQUEST/INVALID', `${field}: ${message}`, { details: { where: 'message', issues: [{ field, message }] } });

/** Weighted list `from → to` at weight w of `to`; null when either side is not a single value. */
function blend<T>(from: T, to: T, w: number): [T, number][] {
  return [
    [from, Math.round((1 - w) * 1e6) / 1e6],
    [to, Math.round(w * 1e6) / 1e6],
  ];
}

export class StreamControl {
  readonly #streams: StreamService;
  readonly #songs: SongService | undefined;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #pending = new Map<string, Map<string, Pending>>();
  readonly #tempos = new Map<string, Tempo>();
  readonly #listeners = new Map<string, Set<(e: ControlEvent) => void>>();
  /** Transition step timers, so close() and a newer transition can stop them. */
  readonly #transitions = new Map<string, NodeJS.Timeout>();
  #closed = false;

  constructor(opts: StreamControlOptions) {
    this.#streams = opts.streams;
    this.#songs = opts.songs;
    this.#log = opts.logger.child({ module: 'StreamControl' });
    this.#now = opts.now ?? Date.now;
  }

  /** Listens to one stream's control events; returns the unsubscribe. */
  on(streamId: string, listener: (e: ControlEvent) => void): () => void {
    let set = this.#listeners.get(streamId);
    if (!set) this.#listeners.set(streamId, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0) this.#listeners.delete(streamId);
    };
  }

  #emit(streamId: string, event: ControlEvent): void {
    for (const l of this.#listeners.get(streamId) ?? []) {
      try {
        l(event);
      } catch (err) {
        this.#log.error({ err }, `emit() | listener threw [streamId:${streamId}] [event:${event.type}]`);
      }
    }
  }

  tempo(streamId: string): Tempo | null {
    return this.#tempos.get(streamId) ?? null;
  }

  /** Sets the stream's tempo from the client's numbers or from a song of the account's. */
  async setTempo(account: Account, streamId: string, input: TempoInput, field = 'tempo'): Promise<Tempo> {
    let bpm = input.bpm;
    let songId: string | null = null;
    if (input.tempo_from_song !== undefined) {
      if (bpm !== undefined) throw invalid(`${field}.bpm`, 'send bpm or tempo_from_song, not both');
      const song = this.#songs ? await this.#songs.get(account, input.tempo_from_song) : null;
      if (!song) throw invalid(`${field}.tempo_from_song`, `no song ${input.tempo_from_song} on this account`);
      bpm = song.bpm;
      songId = song.id;
    }
    const previous = this.#tempos.get(streamId);
    bpm ??= previous?.bpm;
    if (bpm === undefined) throw invalid(`${field}.bpm`, 'the stream has no tempo yet: send bpm or tempo_from_song');
    const tempo: Tempo = {
      bpm,
      // Without a phase, the song (or the clock) starts now.
      phase: input.phase ?? (songId !== null || !previous ? this.#now() : previous.phase),
      beatsPerBar: input.beats_per_bar ?? previous?.beatsPerBar ?? 4,
      songId: songId ?? (input.bpm === undefined ? (previous?.songId ?? null) : null),
    };
    this.#tempos.set(streamId, tempo);
    this.#emit(streamId, { type: 'tempo', tempo });
    return tempo;
  }

  /** The first beat (every n-th, or downbeat) strictly after `after`, ms since the epoch. */
  static nextBeat(tempo: Tempo, every: number | 'bar', after: number): number {
    const n = every === 'bar' ? tempo.beatsPerBar : every;
    const period = (60_000 / tempo.bpm) * n;
    const k = Math.floor((after - tempo.phase) / period) + 1;
    return tempo.phase + k * period;
  }

  scheduled(streamId: string): ScheduledView[] {
    return [...(this.#pending.get(streamId)?.values() ?? [])].map((p) => p.view).sort((a, b) => a.due_at - b.due_at);
  }

  /**
   * Takes one update from a client (the caller has counted it against PATCH's rate limit, which
   * also answers 404 for a stream not the account's): applied now, or held until its time. Scheduled ones are acknowledged when applied, through
   * the `applied`/`failed` events; an immediate one resolves with its ack.
   */
  async submit(account: Account, streamId: string, req: UpdateRequest): Promise<{ ack: UpdateAck } | { scheduled: ScheduledView }> {
    if (this.#closed) throw streamError('SERVICE/UNAVAILABLE', 'The server is shutting down; reconnect shortly.');
    if (req.tempo) await this.setTempo(account, streamId, req.tempo);
    const now = this.#now();
    let due: number | null = null;
    if (req.at !== undefined && req.onBeat) throw invalid('on_beat', 'send at or on_beat, not both');
    if (req.at !== undefined) due = req.at;
    if (req.onBeat) {
      const tempo = this.#tempos.get(streamId);
      if (!tempo) throw invalid('on_beat', 'the stream has no tempo: send a tempo message first (bpm or tempo_from_song)');
      due = StreamControl.nextBeat(tempo, req.onBeat.every, now);
    }
    if (due !== null && due - now > CONTROL_LIMITS.maxAheadMs) throw invalid(req.at !== undefined ? 'at' : 'on_beat', `at most ${CONTROL_LIMITS.maxAheadMs / 1000} s ahead`);
    if (due === null || due - now <= CONTROL_LIMITS.immediateMs) return { ack: await this.#apply(account, streamId, req, due) };

    let map = this.#pending.get(streamId);
    if (!map) this.#pending.set(streamId, (map = new Map()));
    if (map.has(req.id)) throw invalid('id', `an update ${req.id} is already scheduled`);
    if (map.size >= CONTROL_LIMITS.maxScheduled) throw invalid('at', `at most ${CONTROL_LIMITS.maxScheduled} changes may wait at once`);
    const view: ScheduledView = {
      id: req.id,
      due_at: due,
      on_beat: req.onBeat !== undefined,
      keys: Object.keys(req.params),
      transition: req.transition ? { ...req.transition } : null,
    };
    const dueAt = due;
    const timer = setTimeout(() => void this.#fire(streamId, req.id, dueAt), due - now);
    map.set(req.id, { view, timer, account, req });
    this.#emit(streamId, { type: 'scheduled', scheduled: this.scheduled(streamId) });
    return { scheduled: view };
  }

  /** Drops a waiting change; false when there is none by that id. */
  cancel(streamId: string, id: string): boolean {
    const p = this.#pending.get(streamId)?.get(id);
    if (!p) return false;
    clearTimeout(p.timer);
    this.#pending.get(streamId)?.delete(id);
    this.#emit(streamId, { type: 'scheduled', scheduled: this.scheduled(streamId) });
    return true;
  }

  async #fire(streamId: string, id: string, due: number): Promise<void> {
    const map = this.#pending.get(streamId);
    const p = map?.get(id);
    if (!map || !p) return;
    map.delete(id);
    if (map.size === 0) this.#pending.delete(streamId);
    try {
      const ack = await this.#apply(p.account, streamId, p.req, due);
      this.#emit(streamId, { type: 'applied', ack });
    } catch (err) {
      const error = err instanceof ApiError ? err : streamError('INTERNAL/ERROR', undefined, { cause: err });
      if (!(err instanceof ApiError)) this.#log.error({ err }, `fire() | update failed [streamId:${streamId}] [id:${id}]`);
      this.#emit(streamId, { type: 'failed', id, error });
      // The stream is gone (deleted): what else waits for it would fail the same way.
      if (error.code === 'STREAMS/NOT_FOUND') this.forget(streamId);
    }
    this.#emit(streamId, { type: 'scheduled', scheduled: this.scheduled(streamId) });
  }

  async #apply(account: Account, streamId: string, req: UpdateRequest, due: number | null): Promise<UpdateAck> {
    const stop = this.#transitions.get(streamId);
    if (stop) {
      // A newer change wins over a transition still running.
      clearTimeout(stop);
      this.#transitions.delete(streamId);
    }
    if (!req.transition) {
      const out = await this.#streams.update(account, streamId, req.params);
      return this.#ack(account, streamId, req, due, out, null);
    }
    const { steps, method } = req.transition;
    const before = (await this.#streams.get(account, streamId)).params;
    const target = req.params;
    const from: { prompt?: string; seed?: number } = {};
    if (target.prompt !== undefined) {
      if (typeof target.prompt !== 'string') throw invalid('params.prompt', 'a transition blends to a single prompt, not a weighted list');
      if (typeof before.prompt !== 'string') throw invalid('transition', 'the current prompt is a weighted list; set a single prompt before a transition');
      from.prompt = before.prompt;
    }
    if (target.seed !== undefined) {
      if (typeof target.seed !== 'number') throw invalid('params.seed', 'a transition blends to a single seed, not a weighted list');
      if (typeof before.seed !== 'number') throw invalid('transition', 'the current seed is a weighted list; set a single seed before a transition');
      from.seed = before.seed;
    }
    if (from.prompt === undefined && from.seed === undefined) throw invalid('transition', 'a transition needs params.prompt or params.seed');
    const status = await this.#streams.status(account, streamId).catch(() => null);
    const fps = status && status.inference_status.output_fps > 1 ? status.inference_status.output_fps : CONTROL_LIMITS.defaultFps;
    const frameMs = 1000 / fps;
    const step = (i: number): ParamsInput => {
      const w = i / steps;
      const p: ParamsInput = {};
      if (from.prompt !== undefined) {
        p.prompt = i === steps ? (target.prompt as string) : blend(from.prompt, target.prompt as string, w);
        p.prompt_interpolation_method = method;
      }
      if (from.seed !== undefined) {
        p.seed = i === steps ? (target.seed as number) : blend(from.seed, target.seed as number, w);
        p.seed_interpolation_method = method;
      }
      return p;
    };
    // Step 1 carries the rest of the update; steps 2..N only move the weights, one frame apart.
    const { prompt: _p, seed: _s, ...rest } = target;
    const first = await this.#streams.update(account, streamId, { ...rest, ...step(1) });
    const started = this.#now();
    const startedPerf = performance.now();
    let i = 1;
    const next = () => {
      i++;
      // Timers drift; aim each step at its own frame time from the start.
      const delay = Math.max(0, startedPerf + (i - 1) * frameMs - performance.now());
      const timer = setTimeout(() => {
        this.#streams
          .update(account, streamId, step(i))
          .then(() => {
            if (i < steps && this.#transitions.get(streamId) === timer) next();
            else if (this.#transitions.get(streamId) === timer) {
              this.#transitions.delete(streamId);
              this.#emit(streamId, { type: 'transition_done', id: req.id, at: this.#now() });
            }
          })
          .catch((err: unknown) => {
            if (this.#transitions.get(streamId) === timer) this.#transitions.delete(streamId);
            const error = err instanceof ApiError ? err : streamError('INTERNAL/ERROR', undefined, { cause: err });
            this.#emit(streamId, { type: 'failed', id: req.id, error });
          });
      }, delay);
      this.#transitions.set(streamId, timer);
    };
    if (steps > 1) next();
    else this.#emit(streamId, { type: 'transition_done', id: req.id, at: started });
    return this.#ack(account, streamId, req, due, first, { steps, method, frame_ms: frameMs, ends_at: started + (steps - 1) * frameMs });
  }

  async #ack(
    account: Account,
    streamId: string,
    req: UpdateRequest,
    due: number | null,
    out: Awaited<ReturnType<StreamService['update']>>,
    transition: UpdateAck['transition'],
  ): Promise<UpdateAck> {
    const appliedAt = this.#now();
    let frame: number | null = null;
    if (out.classification.mode !== 'none') {
      const s = await this.#streams.status(account, streamId).catch(() => null);
      if (s && s.frames_out !== undefined && s.state !== 'OFFLINE') frame = s.frames_out + 1;
    }
    return {
      id: req.id,
      mode: out.classification.mode,
      hot: out.classification.hot,
      reload: out.classification.reload,
      censored: out.censored,
      node_error: out.nodeError,
      due_at: due,
      applied_at: appliedAt,
      frame,
      transition,
    };
  }

  /** Forgets a stream's tempo and waiting changes (its last socket left, or it was deleted). */
  forget(streamId: string): void {
    for (const p of this.#pending.get(streamId)?.values() ?? []) clearTimeout(p.timer);
    this.#pending.delete(streamId);
    this.#tempos.delete(streamId);
    const t = this.#transitions.get(streamId);
    if (t) clearTimeout(t);
    this.#transitions.delete(streamId);
  }

  /** Idempotent: stops every timer. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const id of [...this.#pending.keys(), ...this.#transitions.keys()]) this.forget(id);
    this.#listeners.clear();
  }
}
