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
import { checkControlNetPreprocessor, ControlNet } from './ControlNet.ts';
import { mergedUnetFile } from './LoraMerge.ts';
import { IpAdapter, loadStyleImage, type FetchImage } from './IpAdapter.ts';
import { supportsIpAdapter } from './ModelFamilies.ts';
import { SafetyChecker } from './SafetyChecker.ts';
import { resizeFrame } from './FrameResize.ts';
import { ModelSessions, providersFor, yieldTurn, type ProviderName, type SessionSettings } from './ModelSessions.ts';
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
  /**
   * Downloads the IP-Adapter style image (http/https URLs). native/ imports nothing internal: the
   * caller passes its SSRF-safe client here and must honour `maxBytes`/`timeoutMs` (5 MiB, 5 s);
   * both are checked again on the result. Without it only data: URLs and raw base64 work.
   */
  fetchImage?: FetchImage;
}

/**
 * - `off`: no ip_adapter requested (or disabled, or scale 0).
 * - `loading`: the style image is being fetched/encoded; frames run without it meanwhile.
 * - `ready`: its tokens are applied.
 * - `error`: the last fetch/encode failed (see `ipAdapterError`); frames run without it.
 */
export type IpAdapterState = 'off' | 'loading' | 'ready' | 'error';

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
  /** Output frames the safety checker flagged and blanked (black). */
  framesBlocked: number;
  ipAdapter: IpAdapterState;
  ipAdapterError: string | null;
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
  /** Loaded (enabled) ControlNets, in params order. */
  controlNets: ControlNet[];
  safety: SafetyChecker | null;
  ip: IpAdapter | null;
  /** Unscaled IP-Adapter tokens of the current style image, and the URL they came from. */
  ipTokens: Float32Array | null;
  ipUrl: string | null;
  ipState: IpAdapterState;
  ipError: string | null;
}

export async function createFramePipeline(o: FramePipelineOptions): Promise<FramePipeline> {
  const params = mergeParams({ ...DEFAULT_STREAM_PARAMS, t_index_list: [...DEFAULT_STREAM_PARAMS.t_index_list] }, o.params);
  checkParams(params);
  for (const c of params.controlnets) checkControlNetPreprocessor(c);
  const p = new Pipeline(o, params);
  await p.init();
  return p;
}

function unsupportedOf(p: StreamParams, e?: Engine): string[] {
  const out: string[] = [];
  const wt = p.ip_adapter?.weight_type;
  if (p.ip_adapter && p.ip_adapter.enabled !== false && typeof wt === 'string' && wt !== 'linear') out.push('ip_adapter.weight_type');
  if (p.ip_adapter && p.ip_adapter.type === 'faceid') out.push('ip_adapter.type=faceid');
  // The checker slot is honoured only when the model folder ships one.
  if (p.use_safety_checker && !p.skip_diffusion && !e?.safety) out.push('use_safety_checker');
  if (p.cached_attention?.enabled) out.push('cached_attention');
  return out;
}

const NO_EXTRAS = { safety: null, ip: null, ipTokens: null, ipUrl: null, ipState: 'off', ipError: null } as const;

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
  /** Background jobs (style image loads) whenIdle() waits for. */
  readonly #background = new Set<Promise<void>>();
  /** Output buffers handed back with release(), reused by the next frames. */
  #pool: Uint8Array[] = [];
  /** Resolvers waiting for the frame in progress to end (reload pacing). */
  #frameWaiters: (() => void)[] = [];
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
    framesBlocked: 0,
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
    const u = unsupportedOf(p, this.#engine);
    if (u.length > 0) this.#log.warn(`FramePipeline | accepted but not implemented, ignored [params:${u.join(',')}]`);
  }

  /**
   * Reload pacing: resolves after the serving pipeline's frame in progress (if any) ends, so a
   * background build runs at most one blocking chunk (ORT session creation and runs are
   * synchronous on this thread) between two frames and the old pipeline keeps its cadence.
   */
  readonly #pace = async (): Promise<void> => {
    await yieldTurn();
    if (this.#busy) await new Promise<void>((resolve) => this.#frameWaiters.push(resolve));
  };

  async #build(params: StreamParams, log: Logger, pace?: () => Promise<void>): Promise<Engine> {
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
      return { params, sessions: null, diffusion: null, filter, controlNets: [], ...NO_EXTRAS, ...chains };
    }
    const providers = this.#o.provider ? [this.#o.provider] : providersFor(params.acceleration);
    const modelDir = join(this.#o.modelsDir, params.model_id);
    const unetFile = mergedUnetFile(this.#o.modelsDir, modelDir, params.lora_dict, log);
    const sessions = await ModelSessions.load({
      modelDir,
      unetFile,
      providers,
      width: params.width,
      height: params.height,
      ...(this.#o.settings ? { settings: this.#o.settings } : {}),
      ...(pace ? { pace } : {}),
      logger: log,
    });
    try {
      await pace?.();
      const diffusion = await StreamDiffusion.create(sessions, params, log);
      diffusion.latentPre = chains.latentPre;
      diffusion.latentPost = chains.latentPost;
      const controlNets: ControlNet[] = [];
      for (const cfg of params.controlnets) {
        if (cfg.enabled === false) continue;
        await pace?.();
        controlNets.push(await ControlNet.open(sessions, this.#o.modelsDir, cfg));
      }
      diffusion.controlNets = controlNets;
      await pace?.();
      const safety = await SafetyChecker.open(sessions);
      let ip: IpAdapter | null = null;
      // Loaded whenever ip_adapter is set (even disabled): `enabled` is hot.
      if (params.ip_adapter && supportsIpAdapter(params.model_id)) {
        await pace?.();
        ip = await IpAdapter.open(sessions);
      }
      if (controlNets.length > 0) log.info(`FramePipeline.build() | controlnets loaded [ids:${controlNets.map((c) => c.modelId).join(',')}]`);
      const e: Engine = { params, sessions, diffusion, filter, controlNets, ...NO_EXTRAS, safety, ip, ...chains };
      this.#syncIp(e);
      return e;
    } catch (err) {
      await sessions.close();
      throw err;
    }
  }

  /**
   * Brings the IP-Adapter tokens in line with the engine's params: fetches/encodes a new style
   * image in the background (frames keep running without it), applies scale/enabled at once.
   */
  #syncIp(e: Engine): void {
    const d = e.diffusion;
    const cfg = e.params.ip_adapter;
    const on = !!(e.ip && d && cfg && cfg.enabled !== false && Number(cfg.scale ?? 1) !== 0);
    if (!on || !e.ip || !d) {
      d?.setIpTokens(null);
      if (!e.ip || !cfg || cfg.enabled === false) e.ipState = 'off';
      return;
    }
    const url = e.params.ip_adapter_style_image_url;
    if (!url) {
      e.ipState = 'error';
      e.ipError = 'no ip_adapter_style_image_url (the hosted default style image is not bundled)';
      d.setIpTokens(null);
      return;
    }
    if (url !== e.ipUrl) {
      e.ipUrl = url;
      e.ipState = 'loading';
      const ip = e.ip;
      const job = loadStyleImage(url, this.#o.fetchImage)
        .then((img) => ip.encode(img))
        .then(
          (tokens) => {
            if (e.ipUrl !== url) return;
            e.ipTokens = tokens;
            e.ipState = 'ready';
            e.ipError = null;
            this.#syncIp(e);
          },
          (err: unknown) => {
            if (e.ipUrl !== url) return;
            e.ipState = 'error';
            e.ipError = err instanceof Error ? err.message : String(err);
            this.#log.warn({ err }, 'ip_adapter | style image failed, running without it');
          },
        );
      this.#background.add(job);
      void job.finally(() => this.#background.delete(job));
    }
    if (e.ipTokens && e.ipState === 'ready') {
      const scale = Number(cfg.scale ?? 1);
      d.setIpTokens(e.ipTokens.map((v) => v * scale));
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
    for (const c of next.controlnets) checkControlNetPreprocessor(c);
    const { hot, reload } = classifyChanges(this.#target, next);
    this.#target = next;
    if (hot.length > 0) this.#hotPending = true;
    // Encode new prompts now, in the background, so the frame that applies them does not wait.
    if (hot.some((k) => k === 'prompt' || k === 'negative_prompt' || k === 'guidance_scale' || k === 'cfg_type')) void this.#engine.diffusion?.prefetch(next);
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
      engine = await this.#build(params, log, this.#pace);
      // Prime the Stream Batch with the latest input so the swap does not open a lag-long gap.
      if (engine.diffusion && this.#lastPre && engine.diffusion.lag > 0) {
        const sized = resizeFrame(this.#lastPre, params.width, params.height);
        const scratch = new Uint8Array(3 * params.width * params.height);
        for (let i = 0; i < engine.diffusion.lag; i++) {
          await this.#pace();
          await engine.diffusion.step(sized, scratch);
        }
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
      // conditioning_scale is the only hot ControlNet field (classifyChanges).
      for (const c of e.controlNets) {
        const cfg = next.controlnets.find((x) => x.model_id === c.modelId);
        if (cfg) c.scale = cfg.conditioning_scale;
      }
      await e.diffusion.apply(next);
      if (hot.includes('ip_adapter') || hot.includes('ip_adapter_style_image_url')) this.#syncIp(e);
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
      const waiters = this.#frameWaiters;
      this.#frameWaiters = [];
      for (const w of waiters) w();
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
    const sized = resizeFrame(pre, width, height);
    this.#lastPre = pre;
    if (e.filter?.shouldSkipRgb(sized.data)) {
      this.#st.framesSkipped++;
      return null;
    }
    // A released buffer when the caller gave one back: a fresh 786 kB buffer per frame costs page
    // faults on every first touch (measured ~5 ms/frame at 512² on the dev VM).
    const n3 = 3 * width * height;
    const k = this.#pool.findIndex((b) => b.length === n3);
    const data = k >= 0 ? (this.#pool.splice(k, 1)[0] as Uint8Array) : new Uint8Array(n3);
    const ortBefore = e.diffusion.sessions.timing.runMs;
    const img = await e.diffusion.step(sized, data);
    ms.ort = e.diffusion.sessions.timing.runMs - ortBefore;
    const d = e.diffusion.stageMs;
    ms.encode = d.encode;
    ms.unet = d.unet;
    ms.math = d.math;
    ms.decode = d.decode;
    if (!img) {
      if (this.#pool.length < 4) this.#pool.push(data);
      return null;
    }
    const t2 = performance.now();
    if (e.safety && e.params.use_safety_checker) {
      const score = await e.safety.score({ width, height, data, ptsMs: frame.ptsMs });
      if (score > e.params.safety_checker_threshold) {
        data.fill(0);
        this.#st.framesBlocked++;
      }
    }
    const out = e.imagePost.apply({ width, height, data, ptsMs: frame.ptsMs });
    e.imagePre.observeOutput(out);
    const t3 = performance.now();
    ms.postprocess = t3 - t2;
    ms.total = t3 - t0;
    return out;
  }

  release(frame: Frame): void {
    if (this.#pool.length < 4 && !this.#pool.includes(frame.data) && frame.data.byteOffset === 0 && frame.data.byteLength === frame.data.buffer.byteLength) {
      this.#pool.push(frame.data);
    }
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
      framesBlocked: this.#st.framesBlocked,
      ipAdapter: e.ipState,
      ipAdapterError: e.ipError,
      stageMs: { ...this.#st.stageMs },
      unsupported: unsupportedOf(e.params, e),
    };
  }

  async whenIdle(): Promise<void> {
    while (this.#reload || this.#background.size > 0) {
      if (this.#reload) await this.#reload;
      await Promise.allSettled([...this.#background]);
    }
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
