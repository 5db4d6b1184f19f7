/**
 * The media node's entry point: frame in → frame out, with hot updates applied on the next frame
 * and reloads built in the background while the old pipeline keeps serving, swapped between two
 * frames (design.md "The diffusion pipeline").
 *
 * Each built pipeline (StreamEngine) runs in a worker thread of its own (EngineThread): ONNX
 * Runtime's session creation and runs are synchronous on their thread, so in the caller's thread
 * they stalled the event loop for a whole frame, and a reload's session creation froze the output
 * for several frame intervals. A reload now builds and primes in a second thread while the first
 * keeps serving; the swap happens between two frames.
 */
import type { Logger } from 'pino';
import { InvalidStateError, NativeError } from './errors.ts';
import type { Frame } from './Frame.ts';
import { EngineThread } from './EngineThread.ts';
import { assertParams, hotPart, mergeParams, type ParamsChange, type StreamParams, type UpdatePlan } from './params/index.ts';

export type { FramePipelineOptions, FramePipelineState, FramePipelineStatus, IpAdapterState, StageMs } from './FramePipelineTypes.ts';
import type { FramePipelineOptions, FramePipelineState, FramePipelineStatus } from './FramePipelineTypes.ts';

export interface FramePipeline {
  /** Params currently requested (what the next reload, if any, will serve). */
  readonly params: Readonly<StreamParams>;
  /**
   * Runs one frame. Returns null when the similarity filter skips it or the Stream Batch is still
   * filling (the first `lag` frames after creation). Calls must not overlap: an overlapping call
   * returns null at once (latest frame wins upstream).
   */
  process(frame: Frame): Promise<Frame | null>;
  /**
   * Applies a change planned where it was asked for (ParamsChange: the API's, or the node's own),
   * as it is: hot keys from the next frame, reload keys by building a new pipeline in the
   * background and swapping it in between two frames. Nothing is merged, checked or planned here.
   * Returns the plan it ran (the change's): what the API reports as `x-params-update`.
   */
  update(change: ParamsChange): UpdatePlan;
  /**
   * Optional: hands an output frame's buffer back for reuse by a later frame. After this call the
   * caller must not read `frame.data` again. Callers that never release get fresh buffers.
   */
  release(frame: Frame): void;
  status(): FramePipelineStatus;
  /** Resolves when no reload or style-image load is in flight (tests, benches, graceful shutdown). */
  whenIdle(): Promise<void>;
  close(): Promise<void>;
}

/** Errors about the params themselves: the caller's to fix, so no fallback hides them. */
const PARAMS_ERRORS: ReadonlySet<string> = new Set(['INVALID_PARAMS', 'UNSUPPORTED_PROCESSOR', 'INVALID_PROCESSOR_PARAMS']);

/**
 * Params that need no model: the image chains alone (skip_diffusion), what serves while the
 * requested pipeline cannot be built.
 */
export function processorsOnly(p: StreamParams): StreamParams {
  return { ...p, skip_diffusion: true, controlnets: [], ip_adapter: null, lora_dict: null, latent_preprocessing: null, latent_postprocessing: null };
}

/**
 * Builds the pipeline for `o.params`. Invalid params throw. A pipeline that cannot be built (a
 * model, ControlNet or image encoder missing or refused by the loader) does not: the image
 * processors alone serve instead, `status().buildError` says why, and a later update that can be
 * built swaps the full pipeline in (the stream never goes dark for it).
 */
export async function createFramePipeline(o: FramePipelineOptions): Promise<FramePipeline> {
  const params = assertParams(mergeParams(null, o.params));
  const log = o.logger.child({ module: 'native/FramePipeline' });
  try {
    return new ReloadingPipeline(o, params, log, await EngineThread.open(o, params, log));
  } catch (err) {
    const fallback = processorsOnly(params);
    if ((err instanceof NativeError && PARAMS_ERRORS.has(err.code)) || params.skip_diffusion) throw err;
    const msg = err instanceof Error ? err.message : String(err);
    log.error({ err }, `create() | pipeline cannot be built, serving the image processors alone [model:${params.model_id}]`);
    const host = await EngineThread.open(o, fallback, log).catch(() => {
      throw err;
    });
    const p = new ReloadingPipeline(o, fallback, log, host);
    p.failedBuild(msg);
    return p;
  }
}

/**
 * The FramePipeline a stream holds: serves frames from one engine thread and swaps in a new one
 * built beside it when a reload param changes (the old keeps serving until the new is ready).
 */
class ReloadingPipeline implements FramePipeline {
  readonly #o: FramePipelineOptions;
  readonly #log: Logger;
  #target: StreamParams;
  #serving: EngineThread;
  /** A finished reload waiting for the next frame boundary. */
  #swap: EngineThread | null = null;
  /** A started worker with the engine's modules loaded, waiting to build the next reload. */
  #spare: EngineThread | null = null;
  #state: FramePipelineState = 'ready';
  #busy = false;
  #reload: Promise<void> | null = null;
  #reloadQueued = false;
  /** Hot keys of the changes taken while a reload builds: the new pipeline gets them when it is ready. */
  #hotSinceBuild = new Set<keyof StreamParams>();
  /** The last input frame, used to prime a reloaded pipeline's Stream Batch. */
  #lastInput: Frame | null = null;
  /** Output buffers handed back with release(), sent with the next frame for reuse. */
  #returned: Uint8Array[] = [];
  #closePromise: Promise<void> | null = null;
  readonly #retired = new Set<Promise<void>>();
  readonly #st = {
    restartCount: 0,
    lastRestartTime: null as number | null,
    lastRestartLogs: [] as string[],
    lastError: null as string | null,
    lastErrorTime: null as number | null,
    buildError: null as string | null,
    fallback: 'none' as FramePipelineStatus['fallback'],
    framesIn: 0,
    framesOut: 0,
    /** Skips and blocks of retired pipelines (each pipeline counts its own). */
    framesSkipped: 0,
    framesBlocked: 0,
  };

  constructor(o: FramePipelineOptions, params: StreamParams, log: Logger, host: EngineThread) {
    this.#o = o;
    this.#log = log;
    this.#target = params;
    this.#serving = host;
    // Started once per stream; afterwards each retired pipeline's thread becomes the spare.
    this.#spare = EngineThread.spawn(log);
  }

  get params(): Readonly<StreamParams> {
    return this.#target;
  }

  /** Records that the requested params could not be built and a processors-only pipeline serves. */
  failedBuild(message: string): void {
    this.#st.lastError = `pipeline cannot be built, serving the image processors alone: ${message}`;
    this.#st.lastErrorTime = Date.now();
    this.#st.buildError = message;
    this.#st.fallback = 'processors';
  }

  update(change: ParamsChange): UpdatePlan {
    if (this.#state === 'closed') throw new InvalidStateError('FramePipeline closed');
    const { hot, reload } = change.plan;
    this.#target = change.target;
    if (hot.length > 0) {
      // Also to a reload that is built and waiting for the next frame; one still building gets
      // the hot keys taken meanwhile when it is done (#reloadOnce).
      for (const host of [this.#serving, this.#swap]) if (host) this.#forward(host, hotPart(change));
      if (this.#reload) for (const k of hot) this.#hotSinceBuild.add(k);
    }
    // A failed build stays reported (buildError, fallback) until a build of the requested params succeeds.
    if (reload.length > 0) this.#startReload();
    this.#log.info(`update() | [hot:${hot.join(',') || '-'}] [reload:${reload.join(',') || '-'}]`);
    return change.plan;
  }

  /** Hands a worker the hot part of a change; it was checked where it was planned, so a failure is only logged. */
  #forward(host: EngineThread, change: ParamsChange): void {
    host.update(change).catch((err: unknown) => this.#log.warn({ err }, 'update() | worker refused hot params'));
  }

  #startReload(): void {
    if (this.#reload) {
      this.#reloadQueued = true;
      return;
    }
    this.#state = 'reloading';
    const run = async () => {
      do {
        this.#reloadQueued = false;
        await this.#reloadOnce(this.#target);
      } while (this.#reloadQueued && this.#state !== 'closed');
    };
    this.#reload = run().finally(() => {
      this.#reload = null;
      if (this.#state === 'reloading') this.#state = 'ready';
    });
  }

  async #reloadOnce(params: StreamParams): Promise<void> {
    const logs: string[] = [];
    const started = Date.now();
    const log = this.#log.child({ reload: this.#st.restartCount + 1 });
    const note = (msg: string) => {
      logs.push(`${new Date().toISOString()} ${msg}`);
      log.info(msg);
    };
    note(`reload() | started [model:${params.model_id}] [size:${params.width}x${params.height}]`);
    this.#hotSinceBuild = new Set();
    // The spare worker skips thread start-up and module loading.
    const host = this.#spare?.alive ? this.#spare : EngineThread.spawn(log);
    this.#spare = null;
    try {
      await host.open(this.#o, params);
      // Prime the Stream Batch with the latest input so the swap does not open a lag-long gap.
      if (this.#lastInput) await host.prime(this.#lastInput);
      if (this.#state === 'closed') {
        await host.close();
        return;
      }
      // Hot keys taken while it was building (reload ones queue the next reload).
      const hot = [...this.#hotSinceBuild];
      if (hot.length > 0) this.#forward(host, { target: this.#target, plan: { mode: 'hot', hot, reload: [] } });
      const old = this.#swap;
      this.#swap = host;
      if (old) this.#retire(old);
      this.#st.buildError = null;
      this.#st.fallback = 'none';
      note(`reload() | ready in ${Date.now() - started} ms, swapping at the next frame`);
    } catch (err) {
      await host.close();
      const msg = err instanceof Error ? err.message : String(err);
      note(`reload() | failed, keeping the previous pipeline: ${msg}`);
      this.#log.error({ err }, 'reload() | failed');
      this.#st.lastError = msg;
      this.#st.lastErrorTime = Date.now();
      this.#st.buildError = msg;
      if (this.#st.fallback === 'none') this.#st.fallback = 'previous';
      // The old pipeline keeps serving (hot keys taken meanwhile reached it); the params stay as
      // asked, so the next reload builds them again, and status says why the build failed until one succeeds.
    } finally {
      this.#st.restartCount++;
      this.#st.lastRestartTime = Date.now();
      this.#st.lastRestartLogs = logs;
    }
  }

  /** Releases a replaced pipeline; its thread becomes the spare for the next reload. */
  #retire(host: EngineThread): void {
    this.#st.framesSkipped += host.status.framesSkipped;
    this.#st.framesBlocked += host.status.framesBlocked;
    const p = (async () => {
      if (this.#spare || this.#state === 'closed') return host.close();
      this.#spare = host;
      await host.reset();
    })().catch((err: unknown) => this.#log.warn({ err }, 'retire() | close failed'));
    this.#retired.add(p);
    void p.finally(() => this.#retired.delete(p));
  }

  async process(frame: Frame): Promise<Frame | null> {
    if (this.#state === 'closed') throw new InvalidStateError('FramePipeline closed');
    if (this.#busy) return null;
    this.#busy = true;
    try {
      let old: EngineThread | null = null;
      if (this.#swap) {
        old = this.#serving;
        this.#serving = this.#swap;
        this.#swap = null;
        this.#log.info(`process() | swapped to the reloaded pipeline [model:${this.#serving.builtParams.model_id}]`);
      }
      this.#st.framesIn++;
      this.#lastInput = frame;
      const returned = this.#returned;
      this.#returned = [];
      try {
        const out = await this.#serving.process(frame, returned);
        if (out) this.#st.framesOut++;
        return out;
      } finally {
        // Closing the old sessions (freeing their memory) beside the new pipeline's first frame
        // slowed that frame 2-3x on the dev VM: the old one is retired once it is done.
        if (old) this.#retire(old);
      }
    } catch (err) {
      this.#st.lastError = err instanceof Error ? err.message : String(err);
      this.#st.lastErrorTime = Date.now();
      throw err;
    } finally {
      this.#busy = false;
    }
  }

  release(frame: Frame): void {
    const d = frame.data;
    if (this.#returned.length < 4 && !this.#returned.includes(d) && d.byteOffset === 0 && d.byteLength === d.buffer.byteLength) this.#returned.push(d);
  }

  status(): FramePipelineStatus {
    const s = this.#serving.status;
    const st = this.#st;
    const workerErrorNewer = s.lastErrorTime !== null && (st.lastErrorTime === null || s.lastErrorTime > st.lastErrorTime);
    return {
      ...s,
      state: this.#state,
      restartCount: st.restartCount,
      lastRestartTime: st.lastRestartTime,
      lastRestartLogs: [...st.lastRestartLogs],
      lastError: workerErrorNewer ? s.lastError : st.lastError,
      lastErrorTime: workerErrorNewer ? s.lastErrorTime : st.lastErrorTime,
      framesIn: st.framesIn,
      framesOut: st.framesOut,
      framesSkipped: st.framesSkipped + s.framesSkipped,
      framesBlocked: st.framesBlocked + s.framesBlocked,
      stageMs: { ...s.stageMs },
      buildError: st.buildError,
      fallback: st.fallback,
    };
  }

  async whenIdle(): Promise<void> {
    do {
      if (this.#reload) await this.#reload;
      await (this.#swap ?? this.#serving).idle();
    } while (this.#reload);
  }

  close(): Promise<void> {
    if (this.#closePromise) return this.#closePromise;
    this.#state = 'closed';
    this.#closePromise = (async () => {
      await this.#reload?.catch(() => {});
      const closing = [this.#serving, this.#swap, this.#spare].filter((h): h is EngineThread => h !== null);
      this.#swap = null;
      this.#spare = null;
      await Promise.allSettled([...closing.map((h) => h.close()), ...this.#retired]);
      this.#log.info('close() | closed');
    })();
    return this.#closePromise;
  }
}
