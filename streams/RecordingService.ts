/**
 * Recordings of a stream's output: what media nodes write into the shared blob store
 * (`recordings/<streamId>/<recordingId>/`, laid out as media/hls/RecordingFiles.ts says: the folder
 * listing is the index), read back here for the API: list, get (duration, size, state), an HLS
 * VOD playlist, one remuxed MP4, delete — and retention per account by age and total size.
 *
 * State: `recording` while the stream's node writes it; `complete` once it ended cleanly (record
 * turned off, or the stream ended on its node); `interrupted` when its writer stopped without
 * ending it (the node died): it plays up to its last complete segment.
 *
 * Retention (`sweep`, every RECORDING_SWEEP_INTERVAL s on the api role): per account, segments
 * older than the plan's age limit go, then the oldest segments until the account's total is
 * within the plan's size limit — oldest first across all its recordings, never the newest
 * segment of a recording being written (nor the one being written: it is a hidden temp file
 * until complete). A recording left with no segments goes.
 */
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { RECORDING_ID, initFileName, readListing, recordingDirKey, recordingsDirKey, remuxRecordingMp4, type RecordingMeta, type RecordingSegmentFile } from '../media/index.ts';
import type { Account, BlobStore, Plan, Store, StreamRecord } from '../store/index.ts';
import { streamError } from '../errors/index.ts';
import type { MediaNodeClient } from './MediaNodeClient.ts';

const GiB = 1024 ** 3;
const DAY_H = 24;

/** Retention per plan: total bytes of an account's recordings, and age of a segment in hours. */
export const RECORDING_LIMITS: Readonly<Record<Plan, { maxBytes: number; maxAgeHours: number }>> = {
  anonymous: { maxBytes: 1 * GiB, maxAgeHours: 1 * DAY_H },
  free: { maxBytes: 5 * GiB, maxAgeHours: 7 * DAY_H },
  songs: { maxBytes: 5 * GiB, maxAgeHours: 7 * DAY_H },
  pro: { maxBytes: 100 * GiB, maxAgeHours: 30 * DAY_H },
  max: { maxBytes: 1024 * GiB, maxAgeHours: 90 * DAY_H },
  internal: { maxBytes: 4096 * GiB, maxAgeHours: 365 * DAY_H },
};

/** Signed playlist and segment links last this long, s (a VOD playlist is watched for a while). */
export const PLAYLIST_LINK_TTL_S = 6 * 3600;
/** A cached MP4 download is removed this long after it was made, ms. */
const DOWNLOAD_KEEP_MS = 3600_000;
const DOWNLOAD = /^download-\d+-\d+-\d+\.mp4$/;

export type RecordingState = 'recording' | 'complete' | 'interrupted';

export interface RecordingView {
  id: string;
  stream_id: string;
  state: RecordingState;
  started_at: string;
  /** null while recording. */
  ended_at: string | null;
  /** Media seconds of the publisher's output (the time it was away, and the slate meanwhile, are not in it). */
  duration: number;
  /** Bytes on disk (segments and init segments). */
  size: number;
  segments: number;
  /** Times the publisher left and came back (or the encoder changed) within it. */
  discontinuities: number;
  /** Stable URLs (API key): 302 to short-lived signed links. */
  mp4_url: string;
  hls_url: string;
}

interface Loaded {
  meta: RecordingMeta;
  segments: RecordingSegmentFile[];
  inits: Set<number>;
  names: string[];
  initBytes: number;
}

export interface RecordingServiceOptions {
  store: Store;
  media: MediaNodeClient;
  blobs: BlobStore;
  /** Signs a file path for `ttlS` seconds and returns the link (control's LinkSigner). */
  links: { sign(path: string, ttlS?: number): string };
  publicUrl: string;
  ffmpegPath?: string;
  /** Operator caps over the plan limits. */
  caps?: { maxBytes: number | null; maxAgeHours: number | null };
  logger: Logger;
  now?: () => number;
}

export class RecordingService {
  readonly #o: RecordingServiceOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  /** MP4 builds in flight, by blob key: concurrent downloads share one remux. */
  readonly #building = new Map<string, Promise<void>>();
  #sweeping: Promise<unknown> | null = null;

  constructor(opts: RecordingServiceOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'RecordingService' });
    this.#now = opts.now ?? Date.now;
  }

  limits(plan: Plan): { maxBytes: number; maxAgeHours: number } {
    const l = RECORDING_LIMITS[plan];
    const caps = this.#o.caps;
    return { maxBytes: Math.min(l.maxBytes, caps?.maxBytes ?? Infinity), maxAgeHours: Math.min(l.maxAgeHours, caps?.maxAgeHours ?? Infinity) };
  }

  #dir(streamId: string, recId: string): string {
    return this.#o.blobs.pathOf(recordingDirKey(streamId, recId));
  }

  async #own(account: Account, streamId: string): Promise<StreamRecord> {
    const s = await this.#o.store.streams.get(streamId);
    if (!s || s.deleted || s.accountId !== account.id) throw streamError('STREAMS/NOT_FOUND', `No stream ${streamId} on this account.`, { details: { id: streamId } });
    return s;
  }

  /** Recording ids of a stream (folders with a meta.json), any order. */
  async #ids(streamId: string): Promise<string[]> {
    try {
      const entries = await readdir(this.#o.blobs.pathOf(recordingsDirKey(streamId)), { withFileTypes: true });
      return entries.filter((e) => e.isDirectory() && RECORDING_ID.test(e.name)).map((e) => e.name);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  }

  async #load(streamId: string, recId: string): Promise<Loaded | null> {
    if (!RECORDING_ID.test(recId)) return null;
    const dir = this.#dir(streamId, recId);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    const raw = await this.#o.blobs.get(`${recordingDirKey(streamId, recId)}/meta.json`);
    if (!raw) return null;
    const meta = JSON.parse(raw.toString('utf8')) as RecordingMeta;
    const { segments, inits } = readListing(names);
    let initBytes = 0;
    for (const id of inits) initBytes += (await stat(join(dir, initFileName(id))).catch(() => ({ size: 0 }))).size;
    return { meta, segments, inits, names, initBytes };
  }

  /** The recording the stream's node writes now, if any. */
  async #activeId(stream: StreamRecord): Promise<string | null> {
    if (!stream.nodeId) return null;
    const st = await this.#o.media.status(stream.nodeId, stream.id).catch(() => null);
    return st?.recordingId ?? null;
  }

  #state(rec: Loaded, active: string | null): RecordingState {
    if (rec.meta.state === 'complete') return 'complete';
    return active === rec.meta.id ? 'recording' : 'interrupted';
  }

  #view(rec: Loaded, active: string | null): RecordingView {
    const state = this.#state(rec, active);
    const first = rec.segments[0];
    const last = rec.segments.at(-1);
    const endedAt = state === 'complete' ? rec.meta.endedAt : state === 'interrupted' && last ? last.wallStartMs + last.durationMs : null;
    const base = `${this.#o.publicUrl}/v1/streams/${rec.meta.streamId}/recordings/${rec.meta.id}`;
    return {
      id: rec.meta.id,
      stream_id: rec.meta.streamId,
      state,
      started_at: new Date(first?.wallStartMs ?? rec.meta.startedAt).toISOString(),
      ended_at: endedAt === null ? null : new Date(endedAt).toISOString(),
      duration: Math.round(rec.segments.reduce((a, s) => a + s.durationMs, 0)) / 1000,
      size: rec.segments.reduce((a, s) => a + s.bytes, 0) + rec.initBytes,
      segments: rec.segments.length,
      discontinuities: rec.segments.filter((s, i) => i > 0 && (s.discontinuity || s.seq !== (rec.segments[i - 1] as RecordingSegmentFile).seq + 1)).length,
      mp4_url: `${base}.mp4`,
      hls_url: `${base}.m3u8`,
    };
  }

  async list(account: Account, streamId: string): Promise<RecordingView[]> {
    const stream = await this.#own(account, streamId);
    const active = await this.#activeId(stream);
    const out: RecordingView[] = [];
    for (const id of await this.#ids(stream.id)) {
      const rec = await this.#load(stream.id, id);
      if (rec) out.push(this.#view(rec, active));
    }
    // Newest first; the id breaks ties.
    return out.sort((a, b) => b.started_at.localeCompare(a.started_at) || b.id.localeCompare(a.id));
  }

  async #record(account: Account, streamId: string, recId: string): Promise<{ stream: StreamRecord; rec: Loaded }> {
    const stream = await this.#own(account, streamId);
    const rec = await this.#load(stream.id, recId);
    if (!rec) throw streamError('RECORDINGS/NOT_FOUND', `No recording ${recId} on stream ${stream.id}.`, { details: { id: recId } });
    return { stream, rec };
  }

  async get(account: Account, streamId: string, recId: string): Promise<RecordingView> {
    const { stream, rec } = await this.#record(account, streamId, recId);
    return this.#view(rec, await this.#activeId(stream));
  }

  async delete(account: Account, streamId: string, recId: string): Promise<void> {
    const { stream, rec } = await this.#record(account, streamId, recId);
    if (this.#state(rec, await this.#activeId(stream)) === 'recording') throw streamError('RECORDINGS/ACTIVE', undefined, { details: { id: recId } });
    await rm(this.#dir(stream.id, recId), { recursive: true, force: true });
    this.#log.info(`delete() | recording deleted [streamId:${stream.id}] [recordingId:${recId}]`);
  }

  /** Every recording of a stream (the stream is being deleted). */
  async deleteAll(streamId: string): Promise<void> {
    await rm(this.#o.blobs.pathOf(recordingsDirKey(streamId)), { recursive: true, force: true });
  }

  /** Signed path of a file of a recording (what `/files/recordings/…` serves). */
  signedPath(streamId: string, recId: string, file: string, ttlS?: number): string {
    return this.#o.links.sign(`/files/recordings/${streamId}/${recId}/${file}`, ttlS);
  }

  /** The keyed playlist URL's target: a signed playlist link. */
  async playlistLink(account: Account, streamId: string, recId: string): Promise<string> {
    const { stream } = await this.#record(account, streamId, recId);
    return this.signedPath(stream.id, recId, 'index.m3u8', PLAYLIST_LINK_TTL_S);
  }

  /**
   * The HLS VOD playlist (EVENT while recording: players reload it), every URI a signed link
   * relative to the playlist's own signed path. A discontinuity (publisher back, encoder change,
   * lost segments) gets EXT-X-DISCONTINUITY and, when the init changes, its own EXT-X-MAP.
   */
  async playlist(streamId: string, recId: string): Promise<string | null> {
    const stream = await this.#o.store.streams.get(streamId);
    if (!stream || stream.deleted) return null;
    const rec = await this.#load(streamId, recId);
    if (!rec) return null;
    const live = this.#state(rec, await this.#activeId(stream)) === 'recording';
    const link = (file: string) => this.signedPath(streamId, recId, file, PLAYLIST_LINK_TTL_S).replace(/^.*\//, '');
    const target = Math.max(1, ...rec.segments.map((s) => Math.ceil(s.durationMs / 1000)));
    const lines = ['#EXTM3U', '#EXT-X-VERSION:7', `#EXT-X-TARGETDURATION:${target}`, `#EXT-X-PLAYLIST-TYPE:${live ? 'EVENT' : 'VOD'}`, `#EXT-X-MEDIA-SEQUENCE:${rec.segments[0]?.seq ?? 0}`, '#EXT-X-INDEPENDENT-SEGMENTS'];
    let prev: RecordingSegmentFile | null = null;
    for (const s of rec.segments) {
      if (prev && (s.discontinuity || s.seq !== prev.seq + 1 || s.initId !== prev.initId)) lines.push('#EXT-X-DISCONTINUITY');
      if (!prev || s.initId !== prev.initId) lines.push(`#EXT-X-MAP:URI="${link(initFileName(s.initId))}"`);
      lines.push(`#EXT-X-PROGRAM-DATE-TIME:${new Date(s.wallStartMs).toISOString()}`, `#EXTINF:${(s.durationMs / 1000).toFixed(3)},`, link(s.name));
      prev = s;
    }
    if (!live) lines.push('#EXT-X-ENDLIST');
    return `${lines.join('\n')}\n`;
  }

  /**
   * The recording as one MP4 (remuxed, cached beside it until its segments change); returns the
   * file name under the recording's folder.
   */
  async mp4(account: Account, streamId: string, recId: string): Promise<string> {
    const { stream, rec } = await this.#record(account, streamId, recId);
    const first = rec.segments[0];
    const last = rec.segments.at(-1);
    if (!first || !last) throw streamError('RECORDINGS/EMPTY', undefined, { details: { id: recId } });
    const name = `download-${first.seq}-${last.seq}-${rec.segments.length}.mp4`;
    if (rec.names.includes(name)) return name;
    const dir = this.#dir(stream.id, recId);
    const key = `${dir}/${name}`;
    let build = this.#building.get(key);
    if (!build) {
      const started = this.#now();
      build = remuxRecordingMp4({ dir, segments: rec.segments, out: join(dir, name), tmpDir: dir, ffmpegPath: this.#o.ffmpegPath ?? 'ffmpeg' })
        .then(async ({ size }) => {
          this.#log.info(`mp4() | remuxed [recordingId:${recId}] [segments:${rec.segments.length}] [bytes:${size}] [ms:${this.#now() - started}]`);
          // Older downloads of this recording are superseded.
          for (const n of rec.names) if (DOWNLOAD.test(n) && n !== name) await rm(join(dir, n), { force: true });
        })
        .finally(() => this.#building.delete(key));
      this.#building.set(key, build);
    }
    await build;
    return name;
  }

  #timer: NodeJS.Timeout | null = null;

  /** Sweeps every `intervalMs` until close() (the timer does not hold the process open). */
  startSweeping(intervalMs: number): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => {
      this.sweep().catch((err: unknown) => this.#log.error({ err }, 'sweep() | failed'));
    }, intervalMs);
    this.#timer.unref();
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#sweeping?.catch(() => undefined);
  }

  /** One retention pass over every account's recordings (never two at once). */
  sweep(): Promise<unknown> {
    this.#sweeping ??= this.#sweep().finally(() => {
      this.#sweeping = null;
    });
    return this.#sweeping;
  }

  async #sweep(): Promise<{ deletedSegments: number; deletedRecordings: number }> {
    const now = this.#now();
    let streamIds: string[];
    try {
      streamIds = (await readdir(this.#o.blobs.pathOf('recordings'), { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { deletedSegments: 0, deletedRecordings: 0 };
      throw err;
    }
    type Item = { streamId: string; rec: Loaded; active: boolean };
    const byAccount = new Map<string, Item[]>();
    let deletedRecordings = 0;
    for (const streamId of streamIds) {
      const stream = await this.#o.store.streams.get(streamId);
      if (!stream || stream.deleted) {
        await this.deleteAll(streamId);
        continue;
      }
      const active = await this.#activeId(stream);
      for (const id of await this.#ids(streamId)) {
        const rec = await this.#load(streamId, id);
        if (!rec) continue;
        // Cached downloads are a convenience: they go after an hour.
        for (const n of rec.names) {
          if (!DOWNLOAD.test(n)) continue;
          const st = await stat(join(this.#dir(streamId, id), n)).catch(() => null);
          if (st && now - st.mtimeMs > DOWNLOAD_KEEP_MS) await rm(join(this.#dir(streamId, id), n), { force: true });
        }
        const list = byAccount.get(stream.accountId) ?? [];
        list.push({ streamId, rec, active: active === id && rec.meta.state !== 'complete' });
        byAccount.set(stream.accountId, list);
      }
    }
    let deletedSegments = 0;
    for (const [accountId, items] of byAccount) {
      const account = await this.#o.store.accounts.get(accountId);
      const limits = this.limits(account?.plan ?? 'anonymous');
      const all = items.flatMap((it) => it.rec.segments.map((seg, i) => ({ it, seg, newest: i === it.rec.segments.length - 1 })));
      all.sort((a, b) => a.seg.wallStartMs - b.seg.wallStartMs);
      let total = items.reduce((a, it) => a + it.rec.initBytes, 0) + all.reduce((a, x) => a + x.seg.bytes, 0);
      const oldest = now - limits.maxAgeHours * 3600_000;
      const gone = new Set<RecordingSegmentFile>();
      for (const x of all) {
        if (x.seg.wallStartMs + x.seg.durationMs >= oldest && total <= limits.maxBytes) break;
        // The newest segment of a recording being written stays: the live edge of its playlist.
        if (x.newest && x.it.active) continue;
        await rm(join(this.#dir(x.it.streamId, x.it.rec.meta.id), x.seg.name), { force: true });
        gone.add(x.seg);
        total -= x.seg.bytes;
        deletedSegments++;
      }
      for (const it of items) {
        const left = it.rec.segments.filter((s) => !gone.has(s));
        if (left.length === 0 && !it.active) {
          await rm(this.#dir(it.streamId, it.rec.meta.id), { recursive: true, force: true });
          deletedRecordings++;
          continue;
        }
        // Init segments no remaining segment uses (the active one's newest init always stays).
        const used = new Set(left.map((s) => s.initId));
        const newestInit = it.rec.segments.at(-1)?.initId;
        for (const id of it.rec.inits) {
          if (!used.has(id) && !(it.active && id === newestInit)) await rm(join(this.#dir(it.streamId, it.rec.meta.id), initFileName(id)), { force: true });
        }
      }
      if (gone.size > 0) this.#log.info(`sweep() | retention [accountId:${accountId}] [segmentsDeleted:${gone.size}] [bytesLeft:${total}] [maxBytes:${limits.maxBytes}] [maxAgeHours:${limits.maxAgeHours}]`);
    }
    return { deletedSegments, deletedRecordings };
  }
}
