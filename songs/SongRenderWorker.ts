/**
 * Consumes `songs.render` jobs: renders each take (off the event loop, in the engine's worker
 * threads), stores WAV and MP3 as blobs, and marks the song done. A crash mid-render leaves the
 * job leased; its lease runs out and another worker renders again from scratch (renders are
 * deterministic, so the result is the same). After `maxAttempts` the song fails and its count
 * is given back — nothing stays `rendering` forever.
 */
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { JobLoop, type BlobStore, type LeasedJob, type Store, type TakeRecord, type TakeStems } from '../store/index.ts';
import { RENDER_QUEUE } from './SongService.ts';

export interface RenderedTake {
  wav: Buffer;
  mp3: Buffer;
  waveform: number[];
  /** Seconds. */
  duration: number;
  /** Standard MIDI File (absent from engines without one). */
  midi?: Buffer;
  /**
   * Stems zip and where each stem lies in it, when asked for; `zip` null when the engine wrote it
   * to `stemsPath` itself.
   */
  stems?: { zip: Buffer | null; members: TakeStems['members'] } | null;
}

/** The engine seam: renders take `n` of a planned song, reporting progress 0–1. */
export type TakeRenderer = (
  plan: unknown,
  n: 1 | 2,
  onProgress: (fraction: number) => void,
  options: { stems: boolean; stemsPath?: string; onMp3Chunk?: (chunk: Buffer) => void },
) => Promise<RenderedTake>;

/** Blob key of a take's MP3 while it is written progressively (the final one is `<n>.mp3`). */
export function partialMp3Key(songId: string, n: number): string {
  return `songs/${songId}/${n}.mp3.part`;
}

export interface SongRenderWorkerOptions {
  store: Store;
  blobs: BlobStore;
  render: TakeRenderer;
  logger: Logger;
  now?: () => number;
  /** Songs rendered at once by this worker (each take uses one render thread). Default 1. */
  concurrency?: number;
  /** Lease per job, ms; renewed every third of it while rendering. Default 30 s. */
  leaseMs?: number;
  /** Render attempts before the song fails. Default 3. */
  maxAttempts?: number;
  /** Wait before a failed render is tried again, ms. Default 5 s. */
  retryDelayMs?: number;
  /** Told how each render attempt ended and how long it took, seconds (for /metrics). */
  onRender?: (outcome: RenderOutcome, seconds: number) => void;
}

/** How a render attempt ended: `done`, `retried` (failed, will run again), `failed` (song failed). */
export type RenderOutcome = 'done' | 'retried' | 'failed';

/** Progress is written at most this often, ms: polling clients see it move without flooding the store. */
const PROGRESS_EVERY_MS = 250;

export class SongRenderWorker {
  readonly #o: Required<Omit<SongRenderWorkerOptions, 'now' | 'onRender'>> & { now: () => number; onRender?: SongRenderWorkerOptions['onRender'] };
  readonly #loop: JobLoop;
  readonly #log: Logger;

  constructor(options: SongRenderWorkerOptions) {
    this.#o = { concurrency: 1, leaseMs: 30_000, maxAttempts: 3, retryDelayMs: 5_000, now: Date.now, ...options };
    this.#log = options.logger.child({ module: 'SongRenderWorker' });
    this.#loop = new JobLoop({
      store: options.store,
      queue: RENDER_QUEUE,
      logger: this.#log,
      handler: (job) => this.#handle(job),
      concurrency: this.#o.concurrency,
      leaseMs: this.#o.leaseMs,
      idleWaitMs: 1_000,
    });
  }

  start(): void {
    this.#loop.start();
  }

  /** Idempotent: stops leasing and waits for renders in flight. */
  close(): Promise<void> {
    return this.#loop.close();
  }

  async #handle(job: LeasedJob): Promise<void> {
    const { store, blobs, maxAttempts, leaseMs, now } = this.#o;
    const songId = (job.payload as { songId?: unknown }).songId;
    const song = typeof songId === 'string' ? await store.songs.get(songId) : null;
    if (!song || song.status === 'done' || song.status === 'failed') {
      await store.queue.ack(job);
      return;
    }
    const iso = () => new Date(now()).toISOString();
    if (job.attempts > maxAttempts) {
      await store.songs.fail(song.id, { error: 'render_failed', message: `The song could not be rendered after ${maxAttempts} attempts.` }, iso());
      await store.queue.ack(job);
      this.#log.warn({ songId: song.id, attempts: job.attempts }, `handle() | gave up [songId:${song.id}]`);
      return;
    }

    // A retried render starts its partial MP3s from scratch.
    await blobs.deletePrefix(`songs/${song.id}/`).catch(() => 0);
    await store.songs.update(song.id, { status: 'rendering', startedAt: iso(), progress: 0, attempts: job.attempts, streaming: [] });
    const renewal = setInterval(() => {
      store.queue.extend(job, leaseMs).catch((err: unknown) => this.#log.warn({ err }, 'handle() | lease renewal failed'));
    }, Math.max(1_000, Math.floor(leaseMs / 3)));
    const started = performance.now();
    try {
      const takes: TakeRecord[] = [];
      let lastWrite = 0;
      const streaming: number[] = [];
      for (let n = 1 as 1 | 2; n <= song.variations; n = (n + 1) as 1 | 2) {
        // Progressive MP3: chunks are appended in order as LAME writes them; the first one also
        // tells readers (through the record) that this take can be fetched while rendering.
        const partKey = partialMp3Key(song.id, n);
        let appended: Promise<void> = Promise.resolve();
        let first = true;
        const onMp3Chunk = (chunk: Buffer) => {
          const isFirst = first;
          first = false;
          appended = appended.then(async () => {
            await blobs.append(partKey, chunk);
            if (isFirst) {
              streaming.push(n);
              await store.songs.update(song.id, { streaming: [...streaming] });
            }
          });
        };
        // The stems zip (≈ 115 MB per 120 s take) is written by the render thread straight to its
        // blob file, chunk by chunk, instead of crossing threads as one fresh buffer.
        const zipKey = `songs/${song.id}/${n}-stems.zip`;
        const stemsPath = song.stems === true ? blobs.pathOf(zipKey) : undefined;
        if (stemsPath !== undefined) await mkdir(dirname(stemsPath), { recursive: true });
        const take = await this.#o.render(song.plan, n, (fraction) => {
          const t = performance.now();
          if (t - lastWrite < PROGRESS_EVERY_MS) return;
          lastWrite = t;
          const progress = Math.min(0.99, (n - 1 + fraction) / song.variations);
          store.songs.update(song.id, { progress }).catch(() => undefined);
        }, { stems: song.stems === true, ...(stemsPath !== undefined ? { stemsPath } : {}), onMp3Chunk });
        await appended;
        const wavKey = `songs/${song.id}/${n}.wav`;
        const mp3Key = `songs/${song.id}/${n}.mp3`;
        await blobs.put(wavKey, take.wav);
        await blobs.put(mp3Key, take.mp3);
        const record: TakeRecord = { n, seed: song.seed + n - 1, duration: take.duration, waveform: take.waveform, wavKey, mp3Key, stems: null };
        if (take.midi) {
          record.midiKey = `songs/${song.id}/${n}.mid`;
          await blobs.put(record.midiKey, take.midi);
        }
        if (take.stems) {
          // Not published until the song record lists it; a retried render deletes it first.
          if (take.stems.zip) await blobs.put(zipKey, take.stems.zip);
          record.stems = { zipKey, members: take.stems.members };
        }
        takes.push(record);
      }
      await store.songs.update(song.id, { status: 'done', takes, progress: 1, finishedAt: iso(), error: null, streaming: [] });
      await store.queue.ack(job);
      // Readers following a partial file keep their open descriptor; new ones get the final file.
      for (const n of streaming) await blobs.delete(partialMp3Key(song.id, n)).catch(() => false);
      this.#o.onRender?.('done', (performance.now() - started) / 1000);
      this.#log.info({ songId: song.id, ms: Math.round(performance.now() - started), takes: takes.length }, `handle() | rendered [songId:${song.id}]`);
    } catch (err) {
      this.#log.error({ err, songId: song.id, attempt: job.attempts }, `handle() | render failed [songId:${song.id}]`);
      if (job.attempts >= maxAttempts) {
        await store.songs.fail(song.id, { error: 'render_failed', message: `The song could not be rendered: ${(err as Error).message}` }, iso());
        await store.queue.ack(job);
        this.#o.onRender?.('failed', (performance.now() - started) / 1000);
      } else {
        await store.songs.update(song.id, { status: 'queued', progress: 0 });
        await store.queue.retry(job, now() + this.#o.retryDelayMs);
        this.#o.onRender?.('retried', (performance.now() - started) / 1000);
      }
    } finally {
      clearInterval(renewal);
    }
  }
}
