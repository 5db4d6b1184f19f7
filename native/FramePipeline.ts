/**
 * The media node's entry point: frame in → frame out, with hot updates applied on the next frame
 * and reloads built in the background while the old pipeline keeps serving, swapped between two
 * frames (design.md "The diffusion pipeline").
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { InvalidStateError } from './errors.ts';
import type { Frame, LatentTensor } from './Frame.ts';
import { assertFrame } from './Frame.ts';
import { frameToTensor, resizeFrame, tensorToFrame } from './ImageTensor.ts';
import { ModelSessions, providersFor, type ProviderName, type SessionSettings } from './ModelSessions.ts';
import { createProcessorChain, type ProcessorChain } from './processors/ProcessorChain.ts';
import { SimilarityFilter } from './SimilarityFilter.ts';
import { StreamDiffusion } from './StreamDiffusion.ts';
import {
  checkParams,
  classifyChanges,
  DEFAULT_STREAM_PARAMS,
  mergeParams,
  type StreamParams,
} from './StreamParams.ts';

export interface FramePipelineOptions {
  /** Root holding one folder per model_id (`<modelsDir>/<model_id>/unet/model.onnx`, …). */
  modelsDir: string;
  /** Initial params; missing keys take Daydream's defaults. */
  params: Partial<StreamParams>;
  /** Forces one execution provider instead of deriving it from `acceleration`. */
  provider?: ProviderName;
  logger: Logger;
  /** ONNX Runtime tuning. */
  settings?: SessionSettings;
}

/**
 * - `ready`: serving frames.
 * - `reloading`: serving frames with the old pipeline while a new one is built.
 * - `closed`: after close().
 */
export type FramePipelineState = 'ready' | 'reloading' | 'closed';

/** Milliseconds spent per stage on the last processed frame. */
export interface StageMs {
  preprocess: number;
  encode: number;
  unet: number;
  math: number;
  decode: number;
  postprocess: number;
  /** Sum of the raw ONNX Runtime `run` calls inside this frame (orchestration overhead = total − ort). */
  ort: number;
  total: number;
}

export interface FramePipelineStatus {
  state: FramePipelineState;
  modelId: string;
  /** The loaded model is a tiny random-weight demo model (model_index.json `_demo`). */
  demo: boolean;
  /** Requested Daydream acceleration. */
  acceleration: string;
  /** Execution providers the sessions really use ([] with skip_diffusion: no model loaded). */
  providers: ProviderName[];
  /** Why the providers differ from what `acceleration` asked for, or null. */
  providerNote: string | null;
  /** Reloads attempted since creation (successful or not). */
  restartCount: number;
  lastRestartTime: number | null;
  /** Log lines of the last reload. */
  lastRestartLogs: string[];
  lastError: string | null;
  lastErrorTime: number | null;
  /** Stream Batch output lag in frames. */
  lag: number;
  framesIn: number;
  framesOut: number;
  /** Frames dropped by the similarity filter. */
  framesSkipped: number;
  stageMs: StageMs;
  /** Params the engine accepts but cannot honour yet (ControlNet, IP-Adapter, …): never silent. */
  unsupported: string[];
}

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
   * Applies a partial update. Throws InvalidParamsError / UnsupportedProcessorError synchronously
   * for bad values. Hot keys apply from the next frame; reload keys build a new pipeline in the
   * background and swap between two frames.
   */
  update(params: Partial<StreamParams>): { hot: string[]; reload: string[] };
  status(): FramePipelineStatus;
  /** Resolves when no reload is in flight (tests, benches, graceful shutdown). */
  whenIdle(): Promise<void>;
  close(): Promise<void>;
}

/** One built pipeline: models, chains, filter for a fixed set of reload params. */
interface Engine {
  params: StreamParams;
  sessions: ModelSessions | null;
  diffusion: StreamDiffusion | null;
  imagePre: ProcessorChain<Frame>;
  imagePost: ProcessorChain<Frame>;
  latentPre: ProcessorChain<LatentTensor>;
  latentPost: ProcessorChain<LatentTensor>;
  filter: SimilarityFilter | null;
}

export async function createFramePipeline(o: FramePipelineOptions): Promise<FramePipeline> {
  const params = mergeParams({ ...DEFAULT_STREAM_PARAMS, t_index_list: [...DEFAULT_STREAM_PARAMS.t_index_list] }, o.params);
  checkParams(params);
  const p = new Pipeline(o, params);
  await p.init();
  return p;
}

function unsupportedOf(p: StreamParams): string[] {
  const out: string[] = [];
  if (p.controlnets.some((c) => c.enabled !== false && c.conditioning_scale !== 0)) out.push('controlnets');
  if (p.ip_adapter && p.ip_adapter.enabled !== false) out.push('ip_adapter');
  if (p.lora_dict && Object.values(p.lora_dict).some((w) => w !== 0)) out.push('lora_dict');
  if (p.use_safety_checker) out.push('use_safety_checker');
  if (p.cached_attention?.enabled) out.push('cached_attention');
  return out;
}

class Pipeline implements FramePipeline {
  readonly #o: FramePipelineOptions;
  readonly #log: Logger;
  #target: StreamParams;
  #engine!: Engine;
  #state: FramePipelineState = 'ready';
  #busy = false;
  #hotPending = false;
  #swap: Engine | null = null;
  #reload: Promise<void> | null = null;
  #reloadQueued = false;
  /** The last preprocessed input, used to prime a reloaded pipeline's Stream Batch. */
  #lastPre: Frame | null = null;
  #closePromise: Promise<void> | null = null;
  readonly #retired = new Set<Promise<void>>();
  readonly #st = {
    restartCount: 0,
    lastRestartTime: null as number | null,
    lastRestartLogs: [] as string[],
    lastError: null as string | null,
    lastErrorTime: null as number | null,
    framesIn: 0,
    framesOut: 0,
    framesSkipped: 0,
    stageMs: { preprocess: 0, encode: 0, unet: 0, math: 0, decode: 0, postprocess: 0, ort: 0, total: 0 },
  };

  constructor(o: FramePipelineOptions, params: StreamParams) {
    this.#o = o;
    this.#log = o.logger.child({ module: 'native/FramePipeline' });
    this.#target = params;
  }

  get params(): Readonly<StreamParams> {
    return this.#target;
  }

  async init(): Promise<void> {
    this.#engine = await this.#build(this.#target, this.#log);
    this.#warnUnsupported(this.#target);
  }

  #warnUnsupported(p: StreamParams): void {
    const u = unsupportedOf(p);
    if (u.length > 0) this.#log.warn(`FramePipeline | accepted but not implemented, ignored [params:${u.join(',')}]`);
  }

  async #build(params: StreamParams, log: Logger): Promise<Engine> {
    const chains = {
      imagePre: createProcessorChain(params.image_preprocessing, 'image'),
      imagePost: createProcessorChain(params.image_postprocessing, 'image'),
      latentPre: createProcessorChain(params.latent_preprocessing, 'latent'),
      latentPost: createProcessorChain(params.latent_postprocessing, 'latent'),
    };
    const filter = params.enable_similar_image_filter
      ? new SimilarityFilter({ threshold: params.similar_image_filter_threshold, maxSkipFrames: params.similar_image_filter_max_skip_frame })
      : null;
    if (params.skip_diffusion) {
      log.info(`FramePipeline.build() | skip_diffusion: processors only [model:${params.model_id}]`);
      return { params, sessions: null, diffusion: null, filter, ...chains };
    }
    const providers = this.#o.provider ? [this.#o.provider] : providersFor(params.acceleration);
    const sessions = await ModelSessions.load({
      modelDir: join(this.#o.modelsDir, params.model_id),
      providers,
      width: params.width,
      height: params.height,
      ...(this.#o.settings ? { settings: this.#o.settings } : {}),
      logger: log,
    });
    try {
      const diffusion = await StreamDiffusion.create(sessions, params, log);
      diffusion.latentPre = chains.latentPre;
      diffusion.latentPost = chains.latentPost;
      return { params, sessions, diffusion, filter, ...chains };
    } catch (err) {
      await sessions.close();
      throw err;
    }
  }

  update(patch: Partial<StreamParams>): { hot: string[]; reload: string[] } {
    if (this.#state === 'closed') throw new InvalidStateError('FramePipeline closed');
    const next = mergeParams(this.#target, patch);
    checkParams(next);
    // Validate processor blocks now so the caller gets the error, not a later frame.
    createProcessorChain(next.image_preprocessing, 'image');
    createProcessorChain(next.image_postprocessing, 'image');
    createProcessorChain(next.latent_preprocessing, 'latent');
    createProcessorChain(next.latent_postprocessing, 'latent');
    const { hot, reload } = classifyChanges(this.#target, next);
    this.#target = next;
    if (hot.length > 0) this.#hotPending = true;
    if (reload.length > 0) this.#startReload();
    this.#warnUnsupported(next);
    this.#log.info(`update() | [hot:${hot.join(',') || '-'}] [reload:${reload.join(',') || '-'}]`);
    return { hot, reload };
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
    let engine: Engine | null = null;
    try {
      engine = await this.#build(params, log);
      // Prime the Stream Batch with the latest input so the swap does not open a lag-long gap.
      if (engine.diffusion && this.#lastPre && engine.diffusion.lag > 0) {
        const x = frameToTensor(resizeFrame(this.#lastPre, params.width, params.height));
        for (let i = 0; i < engine.diffusion.lag; i++) await engine.diffusion.step(x);
      }
      if (this.#state === 'closed') {
        await engine.sessions?.close();
        return;
      }
      const old = this.#swap;
      this.#swap = engine;
      if (old) this.#retire(old);
      note(`reload() | ready in ${Date.now() - started} ms, swapping at the next frame`);
    } catch (err) {
      if (engine) await engine.sessions?.close();
      const msg = err instanceof Error ? err.message : String(err);
      note(`reload() | failed, keeping the previous pipeline: ${msg}`);
      this.#log.error({ err }, 'reload() | failed');
      this.#st.lastError = msg;
      this.#st.lastErrorTime = Date.now();
      // Keep serving what the old engine serves; hot keys requested meanwhile stay requested.
      const { reload } = classifyChanges(this.#engine.params, this.#target);
      const reverted = { ...this.#target };
      for (const k of reload) (reverted as Record<string, unknown>)[k] = this.#engine.params[k];
      this.#target = reverted;
    } finally {
      this.#st.restartCount++;
      this.#st.lastRestartTime = Date.now();
      this.#st.lastRestartLogs = logs;
    }
  }

  #retire(e: Engine): void {
    if (!e.sessions) return;
    const p = e.sessions.close().catch((err: unknown) => this.#log.warn({ err }, 'retire() | session close failed'));
    this.#retired.add(p);
    void p.finally(() => this.#retired.delete(p));
  }

  /** Brings the serving engine up to date: swap a finished reload, then apply hot params. */
  async #sync(): Promise<void> {
    if (this.#swap) {
      const old = this.#engine;
      this.#engine = this.#swap;
      this.#swap = null;
      this.#retire(old);
      this.#log.info(`process() | swapped to the reloaded pipeline [model:${this.#engine.params.model_id}]`);
    }
    if (!this.#hotPending) return;
    this.#hotPending = false;
    const e = this.#engine;
    const { hot } = classifyChanges(e.params, this.#target);
    if (hot.length === 0) return;
    const next = { ...e.params };
    for (const k of hot) (next as Record<string, unknown>)[k] = this.#target[k];
    const prev = e.params;
    e.params = next;
    const blockChanged = (k: keyof StreamParams) => JSON.stringify(prev[k]) !== JSON.stringify(next[k]);
    if (blockChanged('image_preprocessing')) e.imagePre = createProcessorChain(next.image_preprocessing, 'image');
    if (blockChanged('image_postprocessing')) e.imagePost = createProcessorChain(next.image_postprocessing, 'image');
    if (blockChanged('latent_preprocessing')) e.latentPre = createProcessorChain(next.latent_preprocessing, 'latent');
    if (blockChanged('latent_postprocessing')) e.latentPost = createProcessorChain(next.latent_postprocessing, 'latent');
    if (e.diffusion) {
      e.diffusion.latentPre = e.latentPre;
      e.diffusion.latentPost = e.latentPost;
      await e.diffusion.apply(next);
    }
  }

  async process(frame: Frame): Promise<Frame | null> {
    if (this.#state === 'closed') throw new InvalidStateError('FramePipeline closed');
    if (this.#busy) return null;
    this.#busy = true;
    try {
      assertFrame(frame);
      this.#st.framesIn++;
      await this.#sync();
      const out = await this.#run(this.#engine, frame);
      if (out) this.#st.framesOut++;
      return out;
    } catch (err) {
      this.#st.lastError = err instanceof Error ? err.message : String(err);
      this.#st.lastErrorTime = Date.now();
      throw err;
    } finally {
      this.#busy = false;
    }
  }

  async #run(e: Engine, frame: Frame): Promise<Frame | null> {
    const ms = this.#st.stageMs;
    const t0 = performance.now();
    const pre = e.imagePre.apply(frame);
    const t1 = performance.now();
    ms.preprocess = t1 - t0;
    if (!e.diffusion) {
      const out = e.imagePost.apply(pre);
      e.imagePre.observeOutput(out);
      ms.postprocess = performance.now() - t1;
      ms.encode = ms.unet = ms.math = ms.decode = ms.ort = 0;
      ms.total = performance.now() - t0;
      return out;
    }
    const { width, height } = e.params;
    const x = frameToTensor(resizeFrame(pre, width, height));
    this.#lastPre = pre;
    if (e.filter?.shouldSkip(x)) {
      this.#st.framesSkipped++;
      return null;
    }
    const ortBefore = e.diffusion.sessions.timing.runMs;
    const img = await e.diffusion.step(x);
    ms.ort = e.diffusion.sessions.timing.runMs - ortBefore;
    const d = e.diffusion.stageMs;
    ms.encode = d.encode;
    ms.unet = d.unet;
    ms.math = d.math;
    ms.decode = d.decode;
    if (!img) return null;
    const t2 = performance.now();
    const out = e.imagePost.apply(tensorToFrame(img, width, height, frame.ptsMs));
    e.imagePre.observeOutput(out);
    const t3 = performance.now();
    ms.postprocess = t3 - t2;
    ms.total = t3 - t0;
    return out;
  }

  status(): FramePipelineStatus {
    const e = this.#engine;
    const info = e.sessions?.info;
    return {
      state: this.#state,
      modelId: e.params.model_id,
      demo: info?.demo ?? false,
      acceleration: e.params.acceleration,
      providers: info?.providers ?? [],
      providerNote: info?.providerNote ?? null,
      restartCount: this.#st.restartCount,
      lastRestartTime: this.#st.lastRestartTime,
      lastRestartLogs: [...this.#st.lastRestartLogs],
      lastError: this.#st.lastError,
      lastErrorTime: this.#st.lastErrorTime,
      lag: e.diffusion?.lag ?? 0,
      framesIn: this.#st.framesIn,
      framesOut: this.#st.framesOut,
      framesSkipped: this.#st.framesSkipped,
      stageMs: { ...this.#st.stageMs },
      unsupported: unsupportedOf(e.params),
    };
  }

  async whenIdle(): Promise<void> {
    while (this.#reload) await this.#reload;
  }

  close(): Promise<void> {
    if (this.#closePromise) return this.#closePromise;
    this.#state = 'closed';
    this.#closePromise = (async () => {
      await this.#reload?.catch(() => {});
      const closing = [this.#engine, this.#swap].filter((e): e is Engine => e !== null);
      this.#swap = null;
      await Promise.allSettled([...closing.map((e) => e.sessions?.close()), ...this.#retired]);
      this.#log.info('close() | closed');
    })();
    return this.#closePromise;
  }
}
