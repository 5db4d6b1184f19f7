/**
 * A stream's soundtrack: one take of one of the account's rendered songs, mixed into the stream's
 * output audio by its node (media/stream/Soundtrack.ts) for every output. Set with `PUT …/soundtrack`,
 * cleared with `DELETE`, read back with where the node has it now. Stored on the stream first, so
 * a node that misses the change (restarting, or no publisher yet) plays it with the next publisher.
 */
import type { Logger } from 'pino';
import type { SoundtrackState } from '../media/index.ts';
import type { Account, SoundtrackRecord, Store, StreamRecord } from '../store/index.ts';
import { streamError } from '../errors/index.ts';
import type { MediaNodeClient } from './MediaNodeClient.ts';

/** How far from now a `start` time may be, ms (24 h: a show is scheduled the same day). */
const START_WINDOW_MS = 24 * 3600_000;

/** What `PUT …/soundtrack` takes (validated by the route). */
export interface SoundtrackInput {
  song_id: string;
  take: 1 | 2;
  /** `now`, or ms epoch of the take's first sample. */
  start: 'now' | number;
  loop: boolean;
  gain_db: number;
  duck_publisher_db: number;
}

/** The soundtrack as the API shows it. */
export interface SoundtrackView {
  song_id: string;
  take: 1 | 2;
  /** ms epoch of the take's first sample. */
  start_at: number;
  loop: boolean;
  gain_db: number;
  duck_publisher_db: number;
  /** `idle`: no node holds the stream now (it plays with the next publisher); else the node's state. */
  state: SoundtrackState | 'idle';
  /** Where the output is in the take, s (null while idle). */
  position_s: number | null;
  /** Length of the take, s. */
  duration_s: number;
  /** Passes through the take completed (loop). */
  loops: number;
}

export interface SoundtrackServiceOptions {
  store: Store;
  media: MediaNodeClient;
  logger: Logger;
  now?: () => number;
}

export class SoundtrackService {
  readonly #o: SoundtrackServiceOptions;
  readonly #log: Logger;
  readonly #now: () => number;

  constructor(opts: SoundtrackServiceOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'SoundtrackService' });
    this.#now = opts.now ?? Date.now;
  }

  async #own(account: Account, id: string): Promise<StreamRecord> {
    const s = await this.#o.store.streams.get(id);
    if (!s || s.deleted || s.accountId !== account.id) throw streamError('STREAMS/NOT_FOUND', `No stream ${id} on this account.`, { details: { id } });
    return s;
  }

  /** Checks the song (the caller's own, rendered, with that take), stores the soundtrack and has the node play it. */
  async set(account: Account, id: string, input: SoundtrackInput): Promise<SoundtrackView> {
    const stream = await this.#own(account, id);
    if (input.start !== 'now' && Math.abs(input.start - this.#now()) > START_WINDOW_MS) {
      const message = 'more than 24 h from now';
      throw streamError('REQUEST/INVALID', `start: ${message}`, { details: { where: 'body', issues: [{ field: 'start', message }] } });
    }
    const song = await this.#o.store.songs.get(input.song_id);
    // Another account's song reads as no song at all (ids are not a way to probe).
    if (!song || song.accountId !== account.id) {
      throw streamError('SOUNDTRACK/SONG_NOT_FOUND', `No song ${input.song_id} on this account.`, { details: { field: 'song_id', id: input.song_id } });
    }
    if (song.status !== 'done') {
      throw streamError('SOUNDTRACK/SONG_NOT_RENDERED', `Song ${song.id} is ${song.status}; set it once its status is done.`, { details: { field: 'song_id', status: song.status } });
    }
    const take = song.takes.find((t) => t.n === input.take);
    if (!take) throw streamError('SOUNDTRACK/SONG_NOT_FOUND', `Song ${song.id} has no take ${input.take}.`, { details: { field: 'take', takes: song.takes.map((t) => t.n) } });
    const record: SoundtrackRecord = {
      songId: song.id,
      take: input.take,
      wavKey: take.wavKey,
      startAt: input.start === 'now' ? this.#now() : input.start,
      loop: input.loop,
      gainDb: input.gain_db,
      duckPublisherDb: input.duck_publisher_db,
    };
    const updated = await this.#o.store.streams.update(stream.id, { soundtrack: record, updatedAt: new Date(this.#now()).toISOString() });
    if (!updated || updated.deleted) throw streamError('STREAMS/NOT_FOUND', `No stream ${id} on this account.`, { details: { id } });
    await this.#tellNode(updated, record);
    this.#log.info(`set() | soundtrack set [streamId:${stream.id}] [songId:${song.id}] [take:${input.take}] [loop:${input.loop}]`);
    return this.#view(updated, record, take.duration);
  }

  /** Clears the soundtrack (the output audio is the publisher's alone again); idempotent. */
  async clear(account: Account, id: string): Promise<void> {
    const stream = await this.#own(account, id);
    if (!stream.soundtrack) return;
    const updated = await this.#o.store.streams.update(stream.id, { soundtrack: null, updatedAt: new Date(this.#now()).toISOString() });
    if (updated) await this.#tellNode(updated, null);
    this.#log.info(`clear() | soundtrack cleared [streamId:${stream.id}]`);
  }

  /** The stream's soundtrack with where its node has it; null when none is set. */
  async get(account: Account, id: string): Promise<SoundtrackView | null> {
    const stream = await this.#own(account, id);
    const record = stream.soundtrack;
    if (!record) return null;
    const song = await this.#o.store.songs.get(record.songId);
    const duration = song?.takes.find((t) => t.n === record.take)?.duration ?? 0;
    return this.#view(stream, record, duration);
  }

  /** Stored first: a node that misses this (restarting, no publisher yet) plays the stored one with the next publisher. */
  async #tellNode(stream: StreamRecord, record: SoundtrackRecord | null): Promise<void> {
    if (!stream.nodeId) return;
    await this.#o.media.setSoundtrack(stream.nodeId, stream.id, record).catch((err: unknown) => {
      this.#log.warn({ err }, `tellNode() | node did not take the soundtrack now; it applies at the next ingest [streamId:${stream.id}]`);
      return false;
    });
  }

  async #view(stream: StreamRecord, record: SoundtrackRecord, durationS: number): Promise<SoundtrackView> {
    const node = stream.nodeId ? await this.#o.media.status(stream.nodeId, stream.id).catch(() => null) : null;
    const live = node?.soundtrack && node.soundtrack.songId === record.songId && node.soundtrack.take === record.take ? node.soundtrack : null;
    return {
      song_id: record.songId,
      take: record.take,
      start_at: record.startAt,
      loop: record.loop,
      gain_db: record.gainDb,
      duck_publisher_db: record.duckPublisherDb,
      state: live?.state ?? 'idle',
      position_s: live ? Math.round(live.positionS * 1000) / 1000 : null,
      duration_s: live?.durationS ?? durationS,
      loops: live?.loops ?? 0,
    };
  }
}
