/**
 * Live control of running streams, for the per-stream WebSocket (control/routes/control.ts):
 * partial param updates applied now, at a time (`at`), or on the stream's beat (`on_beat`, with a
 * tempo set by the client or taken from one of our songs), optionally as a `transition` that blends
 * the prompt (and seed) from the current value to the new one over N frames.
 *
 * Every update goes through StreamService.update, so validation, censoring and the hot/reload
 * rules are PATCH's own, and each client message counts once against PATCH's rate limit. The api
 * process does not time anything: it validates, stores the params and forwards the change with its
 * absolute target time (ms epoch) to the media node that holds the stream. The node applies it to
 * the first frame captured at or after that time (media/stream/ParamsSchedule.ts), steps a transition
 * one output frame at a time, and reports the frame it landed on (a `landed` node event, over the
 * Redis bus when scaled out); the ack is built from that report. So bus and RPC latency only has
 * to be shorter than the time left before the beat, not added to it.
 *
 * A stream without a live node has no frame to land on: its change is stored at once and
 * acknowledged at its time from this process (frame null). The waiting list for status is kept
 * here (the process that took the change); a restart of the api process forgets the list, not
 * the changes the node holds.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { SongService } from '../songs/index.ts';
import type { Account, Unsubscribe } from '../store/index.ts';
import { CONTROL_TOKEN_TTL_S } from './ControlTokens.ts';
import { streamError, type ApiError } from '../errors/index.ts';
import type { LandedInfo } from './MediaNodeClient.ts';
import type { ScheduledView, TransitionMethod } from './StreamStatusView.ts';
import type { ParamsInput } from './StreamParams.ts';
import type { StreamService, UpdateOutcome } from './StreamService.ts';

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
  /** How long an immediate change's ack waits for the node to name its frame, ms (then frame null). */
  landingWaitMs: 5000,
  /** How long past its time a change the node holds may take to land before it is acked without a frame, ms. */
  landingGraceMs: 5000,
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
  /** When the node applied it, ms since the epoch. */
  applied_at: number;
  /**
   * The output frame that first carries it (the stream's `frames_out` numbering): the first frame
   * captured at or after `due_at` (or, applied on arrival, the next frame processed). Null when
   * the stream has no live output.
   */
  frame: number | null;
  /** That frame's capture time on the node's clock, ms since the epoch (null without a frame). */
  frame_at: number | null;
  /** Capture time of the frame before it (not yet due then), ms since the epoch. */
  prev_frame_at: number | null;
  /** RTP timestamp (90 kHz) of that frame as H.264 WHEP viewers receive it (null without a frame). */
  rtp_timestamp: number | null;
  transition: { steps: number; method: TransitionMethod; frame_ms: number; ends_at: number } | null;
}


/** What the control object tells the sockets of a stream. */
export type ControlEvent =
  | { type: 'applied'; ack: UpdateAck }
  | { type: 'failed'; id: string; error: ApiError }
  | { type: 'scheduled'; scheduled: ScheduledView[] }
  | { type: 'transition_done'; id: string; at: number; frame: number | null; rtp_timestamp: number | null }
  | { type: 'tempo'; tempo: Tempo };

interface Pending {
  /** The id the node knows it by (unique per process: two sockets may reuse a client id). */
  nodeKey: string;
  streamId: string;
  /** null: applied on arrival (not listed as scheduled). */
  view: ScheduledView | null;
  req: UpdateRequest;
  account: Account;
  due: number | null;
  outcome: UpdateOutcome;
  /** The node holding it, or null (no live stream: acked here at its time). */
  nodeId: string | null;
  /** Acks without a frame when nothing lands in time. */
  timer: NodeJS.Timeout | undefined;
  /** For an immediate change: resolves its ack. */
  resolve?: (ack: UpdateAck) => void;
  /** The keys' values before the change (a cancel puts them back in the record). */
  before: ParamsInput;
  transitionFrameMs: number;
}

export interface StreamControlOptions {
  streams: StreamService;
  songs?: SongService | undefined;
  logger: Logger;
  now?: () => number;
}

const invalid = (field: string, message: string) => streamError('REQUEST/INVALID', `${field}: ${message}`, { details: { where: 'message', issues: [{ field, message }] } });

export class StreamControl {
  readonly #streams: StreamService;
  readonly #songs: SongService | undefined;
  readonly #log: Logger;
  readonly #now: () => number;
  /** By node key. */
  readonly #pending = new Map<string, Pending>();
  readonly #tempos = new Map<string, Tempo>();
  readonly #listeners = new Map<string, Set<(e: ControlEvent) => void>>();
  readonly #unsubscribe: Promise<Unsubscribe>;
  #seq = 0;
  readonly #prefix = `ctl-${randomBytes(4).toString('hex')}`;
  #closed = false;

  constructor(opts: StreamControlOptions) {
    this.#streams = opts.streams;
    this.#songs = opts.songs;
    this.#log = opts.logger.child({ module: 'StreamControl' });
    this.#now = opts.now ?? Date.now;
    this.#unsubscribe = this.#streams.onLanded((e) => this.#onLanded(e));
    this.#unsubscribe.catch((err: unknown) => this.#log.error({ err }, 'constructor() | cannot hear the nodes; acks will come without frames'));
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
    // The song playing as the stream's soundtrack: its beats are where its take started.
    let songPhase: number | undefined;
    if (songId !== null && input.phase === undefined) {
      const playing = await this.#streams.soundtrackOf(account, streamId);
      if (playing?.songId === songId) songPhase = playing.startAt;
    }
    const previous = this.#tempos.get(streamId);
    bpm ??= previous?.bpm;
    if (bpm === undefined) throw invalid(`${field}.bpm`, 'the stream has no tempo yet: send bpm or tempo_from_song');
    const tempo: Tempo = {
      bpm,
      // Without a phase: the soundtrack's start when the song plays as it, else the song (or the clock) starts now.
      phase: input.phase ?? songPhase ?? (songId !== null || !previous ? this.#now() : previous.phase),
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
    const out: ScheduledView[] = [];
    for (const p of this.#pending.values()) if (p.streamId === streamId && p.view) out.push(p.view);
    return out.sort((a, b) => a.due_at - b.due_at);
  }

  /**
   * Takes one update from a client (the caller has counted it against PATCH's rate limit, which
   * also answers 404 for a stream not the account's): validated and stored now, then handed to
   * the node with its target time. An immediate one resolves with its ack once the node names
   * the frame; a timed one is acknowledged through the `applied`/`failed` events when it lands.
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
    if (due !== null && due - now <= CONTROL_LIMITS.immediateMs) due = null;
    const timed = due !== null;
    if (timed) {
      const waiting = this.scheduled(streamId);
      if (waiting.some((v) => v.id === req.id)) throw invalid('id', `an update ${req.id} is already scheduled`);
      if (waiting.length >= CONTROL_LIMITS.maxScheduled) throw invalid('at', `at most ${CONTROL_LIMITS.maxScheduled} changes may wait at once`);
    }

    const current: Record<string, unknown> = (await this.#streams.get(account, streamId)).params;
    if (req.transition) {
      const target = req.params;
      if (target.prompt === undefined && target.seed === undefined) throw invalid('transition', 'a transition needs params.prompt or params.seed');
      if (target.prompt !== undefined && typeof target.prompt !== 'string') throw invalid('params.prompt', 'a transition blends to a single prompt, not a weighted list');
      if (target.seed !== undefined && typeof target.seed !== 'number') throw invalid('params.seed', 'a transition blends to a single seed, not a weighted list');
      if (target.prompt !== undefined && typeof current['prompt'] !== 'string') throw invalid('transition', 'the current prompt is a weighted list; set a single prompt before a transition');
      if (target.seed !== undefined && typeof current['seed'] !== 'number') throw invalid('transition', 'the current seed is a weighted list; set a single seed before a transition');
    }
    const before: ParamsInput = Object.fromEntries(Object.keys(req.params).map((k) => [k, current[k]])) as ParamsInput;
    const nodeKey = `${this.#prefix}-${++this.#seq}`;
    const outcome = await this.#streams.update(account, streamId, req.params, {
      schedule: { id: nodeKey, applyAt: due, ...(req.transition ? { transition: req.transition } : {}) },
    });
    const status = req.transition ? await this.#streams.status(account, streamId).catch(() => null) : null;
    const fps = status && status.inference_status.output_fps > 1 ? status.inference_status.output_fps : CONTROL_LIMITS.defaultFps;
    const p: Pending = {
      nodeKey,
      streamId,
      view: timed
        ? { id: req.id, due_at: due as number, on_beat: req.onBeat !== undefined, keys: Object.keys(req.params), transition: req.transition ? { ...req.transition } : null }
        : null,
      req,
      account,
      due,
      outcome,
      nodeId: outcome.scheduledOn,
      timer: undefined,
      before,
      transitionFrameMs: 1000 / fps,
    };

    if (!timed) {
      if (!p.nodeId) {
        const ack = this.#ack(p, null);
        // No frames to step over: the record holds the target already; done once the ack is out.
        if (req.transition) this.#later(streamId, { type: 'transition_done', id: req.id, at: ack.applied_at, frame: null, rtp_timestamp: null });
        return { ack };
      }
      return {
        ack: await new Promise<UpdateAck>((resolve) => {
          p.resolve = resolve;
          p.timer = setTimeout(() => this.#settle(p, null), CONTROL_LIMITS.landingWaitMs);
          this.#pending.set(nodeKey, p);
        }),
      };
    }
    // Held by the node: acked when it lands (or, if the node never says, a while after its time).
    // Without a node: acked here at its time (the record already holds it).
    const wait = Math.max(0, (due as number) - now) + (p.nodeId ? CONTROL_LIMITS.landingGraceMs : 0);
    p.timer = setTimeout(() => this.#settle(p, null), wait);
    this.#pending.set(nodeKey, p);
    this.#emit(streamId, { type: 'scheduled', scheduled: this.scheduled(streamId) });
    return { scheduled: p.view as ScheduledView };
  }

  /** A change landed on its node: ack it (and, for a transition's last step, say so). */
  #onLanded(e: LandedInfo): void {
    const p = this.#pending.get(e.id);
    if (e.kind === 'done') {
      const d = this.#done.get(e.id);
      if (d) {
        this.#done.delete(e.id);
        this.#later(d.streamId, { type: 'transition_done', id: d.id, at: e.appliedAt, frame: e.frame, rtp_timestamp: e.rtpTimestamp });
      }
      if (!p) return;
    }
    if (!p || p.streamId !== e.streamId) return;
    this.#settle(p, e);
  }

  /** Transitions whose last step is still to land, by node key. */
  readonly #done = new Map<string, { streamId: string; id: string }>();

  #settle(p: Pending, landed: LandedInfo | null): void {
    if (this.#pending.get(p.nodeKey) !== p) return;
    this.#pending.delete(p.nodeKey);
    clearTimeout(p.timer);
    const ack = this.#ack(p, landed);
    if (p.req.transition) {
      if (landed && landed.kind === 'done') this.#later(p.streamId, { type: 'transition_done', id: p.req.id, at: landed.appliedAt, frame: landed.frame, rtp_timestamp: landed.rtpTimestamp });
      else if (landed && p.nodeId) this.#done.set(p.nodeKey, { streamId: p.streamId, id: p.req.id });
      else this.#later(p.streamId, { type: 'transition_done', id: p.req.id, at: ack.applied_at, frame: null, rtp_timestamp: null });
    }
    if (p.resolve) p.resolve(ack);
    else this.#emit(p.streamId, { type: 'applied', ack });
    if (p.view) this.#emit(p.streamId, { type: 'scheduled', scheduled: this.scheduled(p.streamId) });
  }

  /** Emits after the ack that goes out with this turn (an immediate ack is sent when its promise settles). */
  #later(streamId: string, event: ControlEvent): void {
    setImmediate(() => this.#emit(streamId, event));
  }

  #ack(p: Pending, landed: LandedInfo | null): UpdateAck {
    const { outcome, req } = p;
    const appliedAt = landed?.appliedAt ?? this.#now();
    const steps = req.transition?.steps ?? 0;
    return {
      id: req.id,
      mode: outcome.classification.mode,
      hot: outcome.classification.hot,
      reload: outcome.classification.reload,
      censored: outcome.censored,
      node_error: landed?.error ?? outcome.nodeError,
      due_at: p.due,
      applied_at: appliedAt,
      frame: landed?.frame ?? null,
      frame_at: landed?.frameAt ?? null,
      prev_frame_at: landed?.prevFrameAt ?? null,
      rtp_timestamp: landed?.rtpTimestamp ?? null,
      transition: req.transition
        ? { steps, method: req.transition.method, frame_ms: p.transitionFrameMs, ends_at: (landed?.frameAt ?? appliedAt) + (steps - 1) * p.transitionFrameMs }
        : null,
    };
  }

  /**
   * Drops a waiting change (on its node too) and puts the keys it set back in the stream record
   * where nothing else changed them since; false when there is none by that id.
   */
  async cancel(account: Account, streamId: string, id: string): Promise<boolean> {
    const p = [...this.#pending.values()].find((x) => x.streamId === streamId && x.view?.id === id);
    if (!p) return false;
    this.#pending.delete(p.nodeKey);
    clearTimeout(p.timer);
    if (p.nodeId) await this.#streams.cancelScheduled(p.nodeId, streamId, p.nodeKey);
    const now: Record<string, unknown> = (await this.#streams.get(account, streamId)).params;
    const back = Object.fromEntries(
      Object.entries(p.before).filter(([k, v]) => v !== undefined && JSON.stringify(now[k]) === JSON.stringify((p.req.params as Record<string, unknown>)[k])),
    ) as ParamsInput;
    // Stored as a plain update: the node already holds these values (it never applied the change).
    if (Object.keys(back).length > 0) await this.#streams.update(account, streamId, back).catch((err: unknown) => this.#log.warn({ err }, `cancel() | record not restored [streamId:${streamId}]`));
    this.#emit(streamId, { type: 'scheduled', scheduled: this.scheduled(streamId) });
    return true;
  }

  /** Forgets a stream's tempo and waiting list (its last socket left, or it was deleted). */
  forget(streamId: string): void {
    for (const p of [...this.#pending.values()]) {
      if (p.streamId !== streamId) continue;
      clearTimeout(p.timer);
      this.#pending.delete(p.nodeKey);
      p.resolve?.(this.#ack(p, null));
    }
    this.#tempos.delete(streamId);
  }

  /** Idempotent: stops every timer. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const p of this.#pending.values()) this.forget(p.streamId);
    this.#listeners.clear();
    void this.#unsubscribe.then((off) => off()).catch(() => undefined);
  }
}
