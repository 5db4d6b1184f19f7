/**
 * The song service behind Area A: puts songs in line under the account's quota and active-song
 * limit (atomically, in the store), answers positions and usage, and turns records into the
 * spec's Song shape. Rendering happens elsewhere (SongRenderWorker) through the `songs.render` queue.
 */
import { randomBytes, randomInt } from 'node:crypto';
import type { Account, Page, SongRecord, SongSectionRecord, Store } from '../store/index.ts';
import { MAX_ACTIVE_SONGS, MONTHLY_SONGS, resetsAt, usageMonth } from './Plans.ts';

/** Queue of render jobs; the job id is the song id, so a song is never queued twice. */
export const RENDER_QUEUE = 'songs.render';

export interface SongRequest {
  prompt: string;
  duration?: number | undefined;
  bpm?: number | undefined;
  key?: string | undefined;
  loop?: boolean | undefined;
  seed?: number | undefined;
  variations?: 1 | 2 | undefined;
  /** Also render stems (opt-in: they cost render time and disk). Default false. */
  stems?: boolean | undefined;
  /** A section plan to follow instead of the engine's own; its bars set the length. */
  sections?: SectionRequest[] | undefined;
}

/** One asked-for section (validated by the API: name from the list, 1–64 bars, energy 0–1). */
export interface SectionRequest {
  name: 'intro' | 'verse' | 'chorus' | 'bridge' | 'build' | 'drop' | 'break' | 'outro';
  bars: number;
  energy: number;
  style?: string | undefined;
}

/** What the planner resolves from a request: the values the Song record shows. */
export interface ResolvedPlan {
  bpm: number;
  /** The length asked for, seconds: the request's, else 120, else a loop's own 8 bars. */
  duration: number;
  /** The section plan used. */
  sections: SongSectionRecord[];
  /** Normalised key the song is in, when one was asked for; null otherwise. */
  key: string | null;
  plan: unknown;
}

/** The seam to the music engine: planning is cheap and synchronous, rendering is not done here. */
export type Planner = (
  req: Required<Pick<SongRequest, 'prompt' | 'loop' | 'seed'>> & Pick<SongRequest, 'duration' | 'bpm' | 'key' | 'sections'>,
) => ResolvedPlan;

export type SongCreateOutcome =
  | { ok: true; song: SongRecord; position: number }
  | { ok: false; reason: 'quota'; used: number; limit: number; plan: Account['plan'] }
  | { ok: false; reason: 'busy'; active: number }
  | { ok: false; reason: 'unavailable' };

export interface Usage {
  plan: Account['plan'];
  limit: number | null;
  used: number;
  resets_at: string;
}

export interface SongServiceOptions {
  store: Store;
  planner: Planner;
  /** True when some renderer can take work (a live worker with render threads). */
  canRender: () => Promise<boolean>;
  now?: () => number;
}

export class SongService {
  readonly #store: Store;
  readonly #planner: Planner;
  readonly #canRender: () => Promise<boolean>;
  readonly #now: () => number;

  constructor(opts: SongServiceOptions) {
    this.#store = opts.store;
    this.#planner = opts.planner;
    this.#canRender = opts.canRender;
    this.#now = opts.now ?? Date.now;
  }

  /**
   * Plans (which may throw the planner's refusal, e.g. an artist name) and queues a song.
   * Defaults: duration 120 s (8 bars for a loop: the planner decides, so the service never fills
   * it in), loop false, a random seed, 1 variation (spec POST /songs), no stems.
   */
  async create(account: Account, req: SongRequest): Promise<SongCreateOutcome> {
    const seed = req.seed ?? randomInt(0, 2 ** 31 - 1);
    const loop = req.loop ?? false;
    const resolved = this.#planner({ prompt: req.prompt, duration: req.duration, loop, seed, bpm: req.bpm, key: req.key, sections: req.sections });
    if (!(await this.#canRender())) return { ok: false, reason: 'unavailable' };

    const nowMs = this.#now();
    const id = `sng_${randomBytes(12).toString('base64url')}`;
    const song: SongRecord = {
      id,
      accountId: account.id,
      status: 'queued',
      prompt: req.prompt,
      duration: resolved.duration,
      bpm: resolved.bpm,
      key: resolved.key,
      loop,
      seed,
      variations: req.variations ?? 1,
      createdAt: new Date(nowMs).toISOString(),
      startedAt: null,
      finishedAt: null,
      error: null,
      takes: [],
      progress: 0,
      usageMonth: usageMonth(nowMs),
      attempts: 0,
      plan: resolved.plan,
      stems: req.stems ?? false,
      sections: resolved.sections,
    };
    const result = await this.#store.songs.create(
      song,
      { month: song.usageMonth, monthlyLimit: MONTHLY_SONGS[account.plan], maxActive: MAX_ACTIVE_SONGS },
      { jobs: [{ queue: RENDER_QUEUE, id, payload: { songId: id } }] },
    );
    if (result.ok) return result;
    if (result.reason === 'quota') return { ...result, plan: account.plan };
    return result;
  }

  /** The account's song, or null (another account's song is as missing as no song). */
  async get(account: Account, id: string): Promise<SongRecord | null> {
    const song = await this.#store.songs.get(id);
    return song && song.accountId === account.id ? song : null;
  }

  list(account: Account, limit: number, cursor: string | null): Promise<Page<SongRecord>> {
    return this.#store.songs.list(account.id, { limit, cursor });
  }

  position(song: SongRecord): Promise<number | null> {
    return song.status === 'queued' ? this.#store.songs.position(song.id) : Promise.resolve(null);
  }

  async usage(account: Account): Promise<Usage> {
    const nowMs = this.#now();
    return {
      plan: account.plan,
      limit: MONTHLY_SONGS[account.plan],
      used: await this.#store.songs.used(account.id, usageMonth(nowMs)),
      resets_at: resetsAt(nowMs),
    };
  }
}
