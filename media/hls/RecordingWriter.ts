/**
 * Writes one recording of a stream's output as it is produced: each complete fMP4 segment the
 * HLS packager hands over (the stream's one encode; nothing is decoded or encoded here) goes to
 * disk under a hidden temp name and is renamed into place, so the folder listing is always a
 * playable index (see RecordingFiles.ts) — a node killed mid-write leaves the recording playable
 * up to its last complete segment.
 *
 * A recording holds the publisher's frames only: the slate the outputs carry while the publisher is
 * away (watched streams, decision 0011) is left out. A segment's live run is written (its slate
 * tail cut off, see CompletedSegment.liveBytes), a segment of slate is skipped, and the next live
 * segment written after either is marked as a discontinuity — as when the publisher's leaving
 * ended the segment on an unwatched stream.
 *
 * Writes are queued one after another off the media path (`push` never waits). If the disk falls
 * behind by more than `maxQueuedBytes` (default 64 MiB ≈ 3 min at 3 Mbit/s), new segments are
 * dropped and the next one written is marked as a discontinuity: a gap, never a broken file.
 *
 * Crash-safe against the process dying (kill -9, OOM): renames are atomic and the page cache
 * survives the process. Against power loss the newest few seconds may be lost (no fsync per
 * segment, which would stall on shared disks).
 */
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { CompletedSegment } from './HlsPackager.ts';
import { initFileName, segmentFileName, type RecordingMeta } from './RecordingFiles.ts';

export interface RecordingWriterOptions {
  /** The recording's folder (created if missing). */
  dir: string;
  id: string;
  streamId: string;
  logger: Logger;
  /** Bytes of segments waiting to be written beyond which new ones are dropped. Default 64 MiB. */
  maxQueuedBytes?: number;
  now?: () => number;
}

export interface RecordingWriterStats {
  id: string;
  segments: number;
  bytes: number;
  /** Media time written, ms (gaps between runs and the slate not counted). */
  durationMs: number;
  dropped: number;
  lastError: string | null;
}

export class RecordingWriter {
  readonly id: string;
  readonly #o: RecordingWriterOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #maxQueued: number;
  readonly #startedAt: number;
  #chain: Promise<void>;
  #queued = 0;
  #seq = 0;
  #lastInitId = -1;
  #initsWritten = new Set<number>();
  /** The next segment written follows a gap (a drop here, or the packager's own discontinuity). */
  #gap = false;
  #closed = false;
  readonly #stats: RecordingWriterStats;

  constructor(opts: RecordingWriterOptions) {
    this.#o = opts;
    this.id = opts.id;
    this.#log = opts.logger.child({ module: 'RecordingWriter', recordingId: opts.id });
    this.#now = opts.now ?? Date.now;
    this.#maxQueued = opts.maxQueuedBytes ?? 64 * 1024 * 1024;
    this.#startedAt = this.#now();
    this.#stats = { id: opts.id, segments: 0, bytes: 0, durationMs: 0, dropped: 0, lastError: null };
    this.#chain = this.#run(async () => {
      await mkdir(opts.dir, { recursive: true });
      await this.#writeMeta(null);
    });
  }

  get stats(): RecordingWriterStats {
    return { ...this.#stats };
  }

  /** Queues a segment's live frames (nothing of a slate segment); returns at once. */
  push(segment: CompletedSegment): void {
    if (this.#closed) return;
    if (segment.liveBytes === 0) {
      this.#gap = true;
      return;
    }
    const data = segment.liveBytes < segment.bytes.length ? segment.bytes.subarray(0, segment.liveBytes) : segment.bytes;
    if (this.#queued + data.length > this.#maxQueued) {
      this.#stats.dropped++;
      this.#gap = true;
      this.#log.warn(`push() | disk behind, segment dropped [msn:${segment.msn}] [queuedBytes:${this.#queued}]`);
      return;
    }
    const discontinuity = this.#seq > 0 && (this.#gap || segment.discontinuity || segment.initId !== this.#lastInitId);
    // A slate tail cut off: whatever is written next follows a gap.
    this.#gap = data.length < segment.bytes.length;
    this.#lastInitId = segment.initId;
    const seq = this.#seq++;
    const bytes = data.length;
    const durationMs = segment.liveDurationMs;
    this.#queued += bytes;
    this.#chain = this.#chain.then(() =>
      this.#run(async () => {
        try {
          if (!this.#initsWritten.has(segment.initId)) {
            await this.#atomicWrite(initFileName(segment.initId), segment.init);
            this.#initsWritten.add(segment.initId);
          }
          const name = segmentFileName({ seq, initId: segment.initId, discontinuity, startMs: segment.startMs, durationMs, wallStartMs: segment.wallStartMs, bytes });
          await this.#atomicWrite(name, data);
          this.#stats.segments++;
          this.#stats.bytes += bytes;
          this.#stats.durationMs += durationMs;
        } finally {
          this.#queued -= bytes;
        }
      }),
    );
  }

  /** Resolves once everything queued so far is on disk (tests, close). */
  flushed(): Promise<void> {
    return this.#chain;
  }

  /** Ends the recording cleanly: waits for queued segments, then marks it complete. */
  async close(): Promise<void> {
    if (this.#closed) return this.#chain;
    this.#closed = true;
    this.#chain = this.#chain.then(() => this.#run(() => this.#writeMeta(this.#now())));
    await this.#chain;
    this.#log.info(`close() | recording complete [segments:${this.#stats.segments}] [bytes:${this.#stats.bytes}] [durationMs:${Math.round(this.#stats.durationMs)}]`);
  }

  async #writeMeta(endedAt: number | null): Promise<void> {
    const meta: RecordingMeta = { id: this.id, streamId: this.#o.streamId, startedAt: this.#startedAt, endedAt, state: endedAt === null ? 'recording' : 'complete' };
    await this.#atomicWrite('meta.json', Buffer.from(JSON.stringify(meta)));
  }

  async #atomicWrite(name: string, data: Buffer): Promise<void> {
    const tmp = join(this.#o.dir, `.${name}.tmp`);
    await writeFile(tmp, data);
    await rename(tmp, join(this.#o.dir, name));
  }

  /** One queued write; a failure is logged and counted, the queue goes on (the next segment follows a gap). */
  async #run(step: () => Promise<void>): Promise<void> {
    try {
      await step();
    } catch (err) {
      this.#gap = true;
      this.#stats.lastError = String(err);
      this.#log.error({ err }, `write failed [dir:${this.#o.dir}]`);
    }
  }
}
