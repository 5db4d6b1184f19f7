/**
 * Clips: the last N seconds (1–60) of a live stream's output as an MP4, cut at keyframes from the
 * minute of output segments the stream's media node keeps (no second encode), ready in well
 * under a second. A clip is two blobs beside each other in the shared blob store:
 * `clips/<streamId>/<clipId>.mp4` (written by the node) and `<clipId>.json` (its record, written
 * here), so every role that shares the blob store serves it.
 *
 * Retention: a stream keeps its newest `MAX_CLIPS_PER_STREAM` clips (the oldest goes when a new
 * one would exceed it); all go with the stream. Requests are limited per stream
 * (`CLIPS_PER_MINUTE`), since each one makes the node write a file.
 */
import type { Logger } from 'pino';
import { newId, type Account, type BlobStore, type Store, type StreamRecord } from '../store/index.ts';
import { streamError } from '../errors/index.ts';
import type { MediaNodeClient } from './MediaNodeClient.ts';

export const MAX_CLIPS_PER_STREAM = 50;
export const CLIPS_PER_MINUTE = 12;
const CLIP_ID = /^clp_[A-Za-z0-9_-]{1,64}$/;

/** A clip as stored (the `.json` blob). */
export interface ClipRecord {
  id: string;
  streamId: string;
  accountId: string;
  /** What was asked, s. */
  seconds: number;
  /** Media time of the MP4, ms. */
  durationMs: number;
  size: number;
  /** ISO time of the first frame. */
  startedAt: string;
  createdAt: string;
}

/** A clip as the API shows it. */
export interface ClipView {
  id: string;
  stream_id: string;
  seconds: number;
  /** Media time, s (whole segments: at least `seconds`, up to one segment more; less when less was live). */
  duration: number;
  size: number;
  started_at: string;
  created_at: string;
  /** Stable URL (API key): 302 to a short-lived signed link. */
  mp4_url: string;
}

export interface ClipServiceOptions {
  store: Store;
  media: MediaNodeClient;
  blobs: BlobStore;
  /** Origin of the API, for `mp4_url`. */
  publicUrl: string;
  logger: Logger;
  now?: () => number;
}

export class ClipService {
  readonly #o: ClipServiceOptions;
  readonly #log: Logger;
  readonly #now: () => number;

  constructor(opts: ClipServiceOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'ClipService' });
    this.#now = opts.now ?? Date.now;
  }

  /** Blob key of a clip's MP4. */
  static mp4Key(streamId: string, clipId: string): string {
    return `clips/${streamId}/${clipId}.mp4`;
  }

  view(c: ClipRecord): ClipView {
    return {
      id: c.id,
      stream_id: c.streamId,
      seconds: c.seconds,
      duration: Math.round(c.durationMs) / 1000,
      size: c.size,
      started_at: c.startedAt,
      created_at: c.createdAt,
      mp4_url: `${this.#o.publicUrl}/v1/streams/${c.streamId}/clips/${c.id}.mp4`,
    };
  }

  async #own(account: Account, streamId: string): Promise<StreamRecord> {
    const s = await this.#o.store.streams.get(streamId);
    if (!s || s.deleted || s.accountId !== account.id) throw streamError('STREAMS/NOT_FOUND', `No stream ${streamId} on this account.`, { details: { id: streamId } });
    return s;
  }

  async create(account: Account, streamId: string, seconds: number): Promise<ClipView> {
    const stream = await this.#own(account, streamId);
    const rate = await this.#o.store.rateLimits.hit(`clips:${stream.id}`, CLIPS_PER_MINUTE, 60_000);
    if (!rate.allowed) {
      throw streamError('CLIPS/RATE_LIMITED', undefined, { headers: { 'retry-after': String(Math.max(1, Math.ceil(rate.retryAfterMs / 1000))) } });
    }
    const id = newId('clp');
    const clip = stream.nodeId ? await this.#o.media.clip(stream.nodeId, stream.id, { seconds, key: ClipService.mp4Key(stream.id, id) }) : null;
    if (!clip) throw streamError('CLIPS/NOT_LIVE', `Stream ${stream.id} has no live output to clip.`, { details: { id: stream.id } });
    const record: ClipRecord = {
      id,
      streamId: stream.id,
      accountId: stream.accountId,
      seconds,
      durationMs: clip.durationMs,
      size: clip.size,
      startedAt: new Date(clip.startedAtMs).toISOString(),
      createdAt: new Date(this.#now()).toISOString(),
    };
    await this.#o.blobs.put(`clips/${stream.id}/${id}.json`, Buffer.from(JSON.stringify(record)));
    this.#log.info(`create() | clip written [streamId:${stream.id}] [clipId:${id}] [seconds:${seconds}] [durationMs:${clip.durationMs}] [bytes:${clip.size}]`);
    await this.#prune(stream.id);
    return this.view(record);
  }

  async #records(streamId: string): Promise<ClipRecord[]> {
    const names = (await this.#o.blobs.list(`clips/${streamId}`)).filter((n) => n.endsWith('.json'));
    const out: ClipRecord[] = [];
    for (const name of names) {
      const raw = await this.#o.blobs.get(`clips/${streamId}/${name}`);
      if (raw) out.push(JSON.parse(raw.toString('utf8')) as ClipRecord);
    }
    // Newest first; the id breaks ties in the same millisecond.
    return out.sort((a, b) => b.createdAt.localeCompare(a.createdAt) || b.id.localeCompare(a.id));
  }

  async #prune(streamId: string): Promise<void> {
    for (const old of (await this.#records(streamId)).slice(MAX_CLIPS_PER_STREAM)) await this.#remove(old);
  }

  async #remove(c: ClipRecord): Promise<void> {
    // The record first: a clip without its record is never listed, one without its file would be.
    await this.#o.blobs.delete(`clips/${c.streamId}/${c.id}.json`);
    await this.#o.blobs.delete(ClipService.mp4Key(c.streamId, c.id));
  }

  async list(account: Account, streamId: string): Promise<ClipView[]> {
    const stream = await this.#own(account, streamId);
    return (await this.#records(stream.id)).map((c) => this.view(c));
  }

  /**
   * A stream's clips by its playback id, for the key-less viewer page: the playback id is already
   * the capability to watch the stream, so it also shows what was clipped from it. Unknown or
   * deleted: STREAMS/NOT_FOUND.
   */
  async listByPlayback(playbackId: string): Promise<ClipRecord[]> {
    const s = await this.#o.store.streams.getByPlaybackId(playbackId);
    if (!s || s.deleted) throw streamError('STREAMS/NOT_FOUND', `No stream plays as ${playbackId}.`, { details: { playback_id: playbackId } });
    return this.#records(s.id);
  }

  /** The clip's record; CLIPS/NOT_FOUND for any id that is not one of this stream's clips. */
  async record(account: Account, streamId: string, clipId: string): Promise<ClipRecord> {
    const stream = await this.#own(account, streamId);
    const raw = CLIP_ID.test(clipId) ? await this.#o.blobs.get(`clips/${stream.id}/${clipId}.json`) : null;
    if (!raw) throw streamError('CLIPS/NOT_FOUND', `No clip ${clipId} on stream ${stream.id}.`, { details: { id: clipId } });
    return JSON.parse(raw.toString('utf8')) as ClipRecord;
  }

  async get(account: Account, streamId: string, clipId: string): Promise<ClipView> {
    return this.view(await this.record(account, streamId, clipId));
  }

  async delete(account: Account, streamId: string, clipId: string): Promise<void> {
    await this.#remove(await this.record(account, streamId, clipId));
  }

  /** Every clip of a stream (the stream is being deleted). */
  async deleteAll(streamId: string): Promise<number> {
    return this.#o.blobs.deletePrefix(`clips/${streamId}/`);
  }
}
