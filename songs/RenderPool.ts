/**
 * A bounded pool of render workers (worker_threads). Takes queue FIFO and render one per worker;
 * each worker is unref'd while idle so an idle pool never keeps the process alive. A worker that
 * dies fails its takes with RenderError and is replaced on the next take.
 *
 * A worker takes its next take as soon as its current one is in LAME's pipe (the worker's `free`
 * message), while LAME (another process, so another core) finishes the last one: the engine and the
 * encoder overlap across takes instead of the thread waiting ≈ 1 s per 120 s take for LAME's tail.
 * At most one take per worker is finishing, so LAME processes stay bounded at two per worker.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { RenderOptions, TakeResult } from './Renderer.ts';
import type { SongPlan } from './SongPlanner.ts';

export class RenderError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'RenderError';
  }
}

export class PoolClosedError extends Error {
  constructor() {
    super('render pool closed');
    this.name = 'PoolClosedError';
  }
}

export interface RenderPoolOptions {
  /** Worker threads, default 2 (one per core on our 2-core machines). */
  size?: number;
  logger?: Logger;
  /**
   * Start every worker now rather than on its first take (default false): a worker's start-up
   * (loading the engine, forking its encoder host) then happens before a song waits on it.
   */
  prewarm?: boolean;
}

interface Job {
  id: number;
  plan: SongPlan;
  n: 1 | 2;
  options: RenderOptions | undefined;
  onProgress: ((fraction: number) => void) | undefined;
  resolve: (r: TakeResult) => void;
  reject: (e: Error) => void;
  /** The worker said its thread is done with this take (only LAME's tail remains). */
  threadFree?: boolean;
}

interface Slot {
  worker: Worker;
  /** The take this worker's thread is rendering. */
  job: Job | null;
  /** A take whose samples are all in LAME's pipe: its MP3 tail (and stems flush) still runs. */
  finishing: Job | null;
}

type WorkerMessage =
  | { id: number; type: 'progress'; fraction: number }
  | { id: number; type: 'mp3chunk'; chunk: Uint8Array }
  | { id: number; type: 'free' }
  | { id: number; type: 'done'; result: TakeResult }
  | { id: number; type: 'error'; message: string; stack?: string };

/**
 * Starts a worker on RenderWorker. Built (dist/, JavaScript: `npm start`, the images) the worker
 * loads the compiled module itself. From sources (tsx: tests, development) `--import tsx` in a
 * worker's execArgv does not register tsx's hooks on Node 20, so a small bootstrap registers tsx's
 * ESM API inside the worker and then imports the worker module.
 */
function startWorker(): Worker {
  if (import.meta.url.endsWith('.js')) return new Worker(new URL('./RenderWorker.js', import.meta.url), { execArgv: [] });
  const url = new URL('./RenderWorker.ts', import.meta.url);
  const api = import.meta.resolve('tsx/esm/api');
  const code = `import(${JSON.stringify(api)}).then((t) => { t.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(code, { eval: true, execArgv: [] });
}

export class RenderPool {
  private readonly size: number;
  private readonly logger: Logger | undefined;
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private nextId = 1;
  private closed = false;
  private closing: Promise<void> | null = null;

  constructor(options: RenderPoolOptions = {}) {
    this.size = Math.max(1, Math.floor(options.size ?? 2));
    this.logger = options.logger;
    if (options.prewarm === true) while (this.slots.length < this.size) this.spawn();
  }

  /** Takes waiting for a worker. */
  get queued(): number {
    return this.queue.length;
  }

  /** Renders take `n` of `plan` on a worker; rejects with RenderError or PoolClosedError. */
  render(plan: SongPlan, n: 1 | 2, onProgress?: (fraction: number) => void, options?: RenderOptions): Promise<TakeResult> {
    if (this.closed) return Promise.reject(new PoolClosedError());
    return new Promise<TakeResult>((resolve, reject) => {
      this.queue.push({ id: this.nextId++, plan, n, options, onProgress, resolve, reject });
      this.pump();
    });
  }

  /** Stops every worker; queued and running takes reject with PoolClosedError. Idempotent. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closed = true;
    const err = new PoolClosedError();
    for (const job of this.queue.splice(0)) job.reject(err);
    const slots = this.slots.splice(0);
    this.closing = Promise.allSettled(
      slots.map(async (s) => {
        for (const job of [s.job, s.finishing]) job?.reject(err);
        s.job = null;
        s.finishing = null;
        await s.worker.terminate();
      }),
    ).then(() => undefined);
    return this.closing;
  }

  private pump(): void {
    while (this.queue.length > 0) {
      // An idle worker first, then a new one, then one whose last take is finishing in LAME.
      let slot = this.slots.find((s) => s.job === null && s.finishing === null);
      if (!slot && this.slots.length < this.size) slot = this.spawn();
      slot ??= this.slots.find((s) => s.job === null);
      if (!slot) return;
      const job = this.queue.shift() as Job;
      slot.job = job;
      slot.worker.ref();
      this.logger?.debug({ id: job.id, n: job.n, seed: job.plan.seed }, `render() | started [take:${job.n}]`);
      // Functions cannot cross threads: the worker is told to forward MP3 chunks, and they come back as messages.
      const { onMp3Chunk, ...rest } = job.options ?? {};
      slot.worker.postMessage({ id: job.id, plan: job.plan, n: job.n, options: { ...rest, progressive: onMp3Chunk !== undefined } });
    }
  }

  /**
   * A take whose thread is free moves to `finishing` when that place is empty, and the worker may
   * take the next one.
   */
  private settle(slot: Slot): void {
    if (slot.job?.threadFree === true && slot.finishing === null) {
      slot.finishing = slot.job;
      slot.job = null;
    }
    this.pump();
  }

  private spawn(): Slot {
    const worker = startWorker();
    const slot: Slot = { worker, job: null, finishing: null };
    worker.unref();
    worker.on('message', (msg: WorkerMessage) => {
      const job = slot.job?.id === msg.id ? slot.job : slot.finishing?.id === msg.id ? slot.finishing : null;
      if (!job) return;
      if (msg.type === 'mp3chunk') {
        try {
          job.options?.onMp3Chunk?.(Buffer.from(msg.chunk.buffer, msg.chunk.byteOffset, msg.chunk.byteLength));
        } catch (e) {
          this.logger?.warn({ err: e }, 'render() | mp3 chunk listener threw');
        }
        return;
      }
      if (msg.type === 'progress') {
        try {
          job.onProgress?.(msg.fraction);
        } catch (e) {
          this.logger?.warn({ err: e }, 'render() | progress listener threw');
        }
        return;
      }
      if (msg.type === 'free') {
        job.threadFree = true;
        this.settle(slot);
        return;
      }
      if (slot.job === job) slot.job = null;
      else slot.finishing = null;
      this.settle(slot);
      if (slot.job === null && slot.finishing === null) worker.unref();
      if (msg.type === 'done') {
        const r = msg.result;
        // Transferred ArrayBuffers arrive as Uint8Array views; give callers Buffers.
        const buf = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength);
        job.resolve({ ...r, wav: buf(r.wav), mp3: buf(r.mp3), midi: buf(r.midi), stems: r.stems ? { ...r.stems, zip: r.stems.zip ? buf(r.stems.zip) : null } : null });
        this.logger?.debug({ id: job.id }, `render() | done [take:${job.n}]`);
      } else {
        const e = new RenderError(`render failed [take:${job.n}] [seed:${job.plan.seed}]: ${msg.message}`);
        if (msg.stack) e.stack = msg.stack;
        job.reject(e);
      }
    });
    const onDeath = (cause: unknown) => {
      const idx = this.slots.indexOf(slot);
      if (idx < 0) return;
      this.slots.splice(idx, 1);
      for (const job of [slot.job, slot.finishing]) job?.reject(new RenderError(`render worker died [take:${job.n}]`, { cause }));
      slot.job = null;
      slot.finishing = null;
      if (!this.closed) {
        this.logger?.error({ err: cause }, 'render() | worker died');
        this.pump();
      }
    };
    worker.on('error', onDeath);
    worker.on('exit', (code) => onDeath(new Error(`worker exited [code:${code}]`)));
    this.slots.push(slot);
    return slot;
  }
}
