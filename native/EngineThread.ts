/**
 * The calling thread's handle on one StreamEngine running in a worker thread (EngineWorker):
 * request/response by id, the worker's log lines written through the caller's logger, style-image
 * downloads served by the caller's fetchImage, and the latest status kept for synchronous reads.
 *
 * Frames go in by one copy into an input buffer that is transferred to the worker and comes back
 * with the reply (the caller keeps its own buffer; nothing is allocated per frame), and come out
 * by transfer (no copy); buffers the caller hands back travel with the next frame for reuse. A
 * structured clone of each 786 kB input instead cost a fresh allocation per frame: 0.4–1.1 ms
 * against 0.2–0.4 ms per round trip, measured side by side on the dev VM.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { InferenceError, NativeError, type NativeErrorCode } from './errors.ts';
import type { Frame } from './Frame.ts';
import type { FramePipelineOptions, FramePipelineStatus } from './FramePipelineTypes.ts';
import type { ParamsChange, StreamParams } from './params/index.ts';

/** What the worker needs to open its pipeline (functions and loggers cannot cross threads). */
export interface WorkerOpenOptions {
  modelsDir: string;
  params: StreamParams;
  provider?: FramePipelineOptions['provider'];
  settings?: FramePipelineOptions['settings'];
  /** pino level name for the worker's lines (the caller's logger filters again). */
  logLevel: string;
  /** Whether http(s) style images can be downloaded (the caller passed a fetchImage). */
  canFetch: boolean;
  imageLimits?: FramePipelineOptions['imageLimits'];
}

export type HostRequest =
  | { op: 'open'; id: number; opts: WorkerOpenOptions }
  | { op: 'process'; id: number; frame: Frame; returned: Uint8Array[] }
  | { op: 'update'; id: number; change: ParamsChange }
  | { op: 'prime'; id: number; frame: Frame }
  | { op: 'idle'; id: number }
  | { op: 'close'; id: number }
  | { op: 'fetched'; id: number; data?: Uint8Array; error?: string };

/** The value of a `process` reply: the output, and the input buffer back unless it left as the output. */
export interface ProcessReply {
  frame: Frame | null;
  input: Uint8Array | null;
}

export type WorkerMessage =
  | { op: 'reply'; id: number; value?: unknown; status?: FramePipelineStatus; error?: { name: string; message: string; code: string | null } }
  | { op: 'fetch'; id: number; url: string; limits: { maxBytes: number; timeoutMs: number } }
  | { op: 'log'; line: string };

/** pino's numeric levels → method names. */
const LEVELS: Record<number, 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal'> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };
/** `once` keys of worker log lines already written at their level, for the whole process. */
const loggedOnce = new Set<string>();

/**
 * Starts EngineWorker: the compiled module when built (dist/), else through a bootstrap that
 * registers tsx's ESM API first (`--import tsx` in execArgv does not register tsx's hooks inside a
 * worker on Node 20), as songs/RenderPool.ts does.
 */
function startWorker(): Worker {
  if (import.meta.url.endsWith('.js')) return new Worker(new URL('./EngineWorker.js', import.meta.url), { execArgv: [] });
  const url = new URL('./EngineWorker.ts', import.meta.url);
  const api = import.meta.resolve('tsx/esm/api');
  const code = `import(${JSON.stringify(api)}).then((t) => { t.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(code, { eval: true, execArgv: [] });
}

/** An error from the worker as the typed error callers match on (`code`, `message`, `name`). */
function rehydrate(e: { name: string; message: string; code: string | null }): Error {
  const err = e.code ? new NativeError(e.code as NativeErrorCode, e.message) : new Error(e.message);
  err.name = e.name;
  return err;
}

function wholeBuffer(data: Uint8Array): ArrayBuffer | null {
  const b = data.buffer;
  return b instanceof ArrayBuffer && data.byteOffset === 0 && data.byteLength === b.byteLength ? b : null;
}

export class EngineThread {
  /** The worker's status as of its last reply. */
  status!: FramePipelineStatus;
  readonly #worker: Worker;
  readonly #log: Logger;
  #fetchImage: FramePipelineOptions['fetchImage'];
  #params: StreamParams | null = null;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  #nextId = 0;
  /** Input buffers back from the worker, for the next frames (ORT refuses shared memory, so no SharedArrayBuffer). */
  #inputs: ArrayBuffer[] = [];
  #dead: Error | null = null;
  #closed: Promise<void> | null = null;

  private constructor(log: Logger) {
    this.#log = log;
    this.#worker = startWorker();
    this.#worker.on('message', (m: WorkerMessage) => this.#onMessage(m));
    this.#worker.on('error', (err) => this.#fail(new InferenceError('worker', err.message, { cause: err })));
    this.#worker.on('exit', (code) => this.#fail(new InferenceError('worker', `pipeline worker exited (code ${code})`)));
  }

  /**
   * Starts a worker thread that loads the engine's modules and waits for open(): a spare one
   * makes a later reload skip thread start-up and module loading (about 0.5 s of CPU under tsx,
   * which would otherwise compete with the serving pipeline's frames).
   */
  static spawn(log: Logger): EngineThread {
    // The worker imports StreamEngine (and ONNX Runtime) at start, before any request.
    return new EngineThread(log);
  }

  /** Starts a worker and builds the pipeline there; rejects with the build's error. */
  static async open(o: FramePipelineOptions, params: StreamParams, log: Logger): Promise<EngineThread> {
    const h = new EngineThread(log);
    await h.open(o, params);
    return h;
  }

  /** Params the worker's pipeline was built with (its reload keys never change). */
  get builtParams(): StreamParams {
    if (!this.#params) throw new InferenceError('worker', 'pipeline not opened');
    return this.#params;
  }

  /** Builds the pipeline in this (spawned) worker; on failure the worker is ended and the error thrown. */
  async open(o: FramePipelineOptions, params: StreamParams): Promise<void> {
    this.#fetchImage = o.fetchImage;
    const log = this.#log;
    const opts: WorkerOpenOptions = {
      modelsDir: o.modelsDir,
      params,
      ...(o.provider ? { provider: o.provider } : {}),
      ...(o.settings ? { settings: o.settings } : {}),
      logLevel: log.level,
      canFetch: !!o.fetchImage,
      ...(o.imageLimits ? { imageLimits: o.imageLimits } : {}),
    };
    try {
      await this.#request({ op: 'open', id: 0, opts });
      this.#params = params;
    } catch (err) {
      this.#dead ??= err instanceof Error ? err : new Error(String(err));
      await this.#worker.terminate();
      throw err;
    }
  }

  /** Runs one frame in the worker; `returned` are output buffers the caller handed back. */
  async process(frame: Frame, returned: Uint8Array[]): Promise<Frame | null> {
    const n = frame.data.byteLength;
    let buf = this.#inputs.pop();
    if (buf?.byteLength !== n) buf = new ArrayBuffer(n);
    const data = new Uint8Array(buf);
    data.set(frame.data);
    const transfer = [buf, ...returned.map(wholeBuffer).filter((b): b is ArrayBuffer => b !== null)];
    const r = (await this.#request({ op: 'process', id: 0, frame: { ...frame, data }, returned }, transfer)) as ProcessReply;
    if (r.input && this.#inputs.length < 2) this.#inputs.push(r.input.buffer as ArrayBuffer);
    return r.frame;
  }

  /** Hands the worker a planned change (its hot part) to apply from its next frame (messages stay in order). */
  update(change: ParamsChange): Promise<void> {
    return this.#request({ op: 'update', id: 0, change }).then(() => undefined);
  }

  /** Fills the worker pipeline's Stream Batch with `frame`. */
  prime(frame: Frame): Promise<void> {
    return this.#request({ op: 'prime', id: 0, frame }).then(() => undefined);
  }

  /** Resolves when the worker has no style-image load in flight (and refreshes `status`). */
  idle(): Promise<void> {
    return this.#request({ op: 'idle', id: 0 }).then(() => undefined);
  }

  /**
   * Closes the pipeline's sessions but keeps the thread, ready to open() another pipeline: a
   * retired pipeline's worker becomes the next reload's spare, so reloads never pay for thread
   * start-up and module loading (about 0.5–2 s of CPU under tsx on the dev VM).
   */
  async reset(): Promise<void> {
    if (!this.#params || this.#dead) return;
    this.#params = null;
    await this.#request({ op: 'close', id: 0 });
  }

  /** Closes the pipeline's sessions, then ends the thread. Idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      await this.reset().catch((err: unknown) => this.#log.warn({ err }, 'EngineThread.close() | close failed'));
      this.#dead ??= new InferenceError('worker', 'pipeline closed');
      await this.#worker.terminate();
    })();
    return this.#closed;
  }

  /** False once the thread ended (crash or close). */
  get alive(): boolean {
    return this.#dead === null;
  }

  #request(m: HostRequest, transfer: ArrayBuffer[] = []): Promise<unknown> {
    if (this.#dead) return Promise.reject(this.#dead);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#worker.postMessage({ ...m, id }, transfer);
    });
  }

  #onMessage(m: WorkerMessage): void {
    if (m.op === 'log') return this.#writeLog(m.line);
    if (m.op === 'fetch') return void this.#fetch(m.id, m.url, m.limits);
    const p = this.#pending.get(m.id);
    this.#pending.delete(m.id);
    if (m.status) this.status = m.status;
    if (m.error) p?.reject(rehydrate(m.error));
    else p?.resolve(m.value);
  }

  async #fetch(id: number, url: string, limits: { maxBytes: number; timeoutMs: number }): Promise<void> {
    try {
      if (!this.#fetchImage) throw new Error('no fetchImage configured');
      const buf = await this.#fetchImage(url, limits);
      const data = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength).slice();
      this.#worker.postMessage({ op: 'fetched', id, data } satisfies HostRequest, [data.buffer]);
    } catch (err) {
      this.#worker.postMessage({ op: 'fetched', id, error: err instanceof Error ? err.message : String(err) } satisfies HostRequest);
    }
  }

  #writeLog(line: string): void {
    try {
      const { level, msg, ...rest } = JSON.parse(line) as { level: number; msg?: string } & Record<string, unknown>;
      // A line marked `once` (ModelSessions' provider fallback) is written at its level the first
      // time in this process and at debug after that: each pipeline runs in its own thread.
      if (typeof rest['once'] === 'string') {
        if (loggedOnce.has(rest['once'])) return this.#log.debug(rest, msg ?? '');
        loggedOnce.add(rest['once']);
      }
      this.#log[LEVELS[level] ?? 'info'](rest, msg ?? '');
    } catch {
      this.#log.info(line.trim());
    }
  }

  /** The worker died (crash, exit): every waiting request fails with the reason. */
  #fail(err: Error): void {
    this.#dead ??= err;
    for (const p of this.#pending.values()) p.reject(this.#dead);
    this.#pending.clear();
  }
}
