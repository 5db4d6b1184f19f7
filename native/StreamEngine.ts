/**
 * One built diffusion pipeline in the calling thread: models, processor chains, similarity
 * filter for a fixed set of reload params, with hot params applied on the next frame. A
 * FramePipeline runs each StreamEngine in a worker thread of its own and builds a new one for
 * a reload (design.md "The diffusion pipeline").
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { InvalidParamsError, InvalidStateError } from './errors.ts';
import type { Frame, LatentTensor } from './Frame.ts';
import { assertFrame } from './Frame.ts';
import { ControlNet } from './ControlNet.ts';
import type { FramePipelineOptions, FramePipelineState, FramePipelineStatus, IpAdapterState } from './FramePipelineTypes.ts';
import { resizeFrame } from './FrameResize.ts';
import { IpAdapter, loadStyleImage } from './IpAdapter.ts';
import { mergedUnetFile } from './LoraMerge.ts';
import { ModelSessions, providersFor } from './ModelSessions.ts';
import { createProcessorChain, type ProcessorChain } from './processors/ProcessorChain.ts';
import { SafetyChecker } from './SafetyChecker.ts';
import { SimilarityFilter } from './SimilarityFilter.ts';
import { StreamDiffusion } from './StreamDiffusion.ts';
import { assertParams, mergeParams, paramsWork, supportsIpAdapter, type ParamsChange, type StreamParams } from './params/index.ts';
import { ImageDecoder } from '../images/index.ts';


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

export class StreamEngine {
  readonly #o: FramePipelineOptions;
  readonly #images: ImageDecoder;
  readonly #log: Logger;
  #target: StreamParams;
  #engine!: Engine;
  #state: FramePipelineState = 'ready';
  #busy = false;
  /** The frame being run, awaited by close(). */
  #inflight: Promise<Frame | null> | null = null;
  /** Hot keys of the changes taken since the last frame: the next frame applies their values from #target. */
  readonly #hotKeys = new Set<keyof StreamParams>();
  #closePromise: Promise<void> | null = null;
  /** Background jobs (style image loads) whenIdle() waits for. */
  readonly #background = new Set<Promise<void>>();
  /** Output buffers handed back with release(), reused by the next frames. */
  #pool: Uint8Array[] = [];
  readonly #st = {
    lastError: null as string | null,
    lastErrorTime: null as number | null,
    framesIn: 0,
    framesOut: 0,
    framesSkipped: 0,
    framesBlocked: 0,
    stageMs: { preprocess: 0, encode: 0, unet: 0, math: 0, decode: 0, control: 0, postprocess: 0, ort: 0, total: 0 },
  };

  /**
   * Builds the engine for `o.params` (merged with Daydream's defaults and validated), or for
   * `checked`: full params checked where they were planned (FramePipeline's worker), taken as they are.
   */
  static async open(o: FramePipelineOptions, checked?: StreamParams): Promise<StreamEngine> {
    const params = checked ?? assertParams(mergeParams(null, o.params));
    const p = new StreamEngine(o, params);
    p.#engine = await p.#build(params, p.#log);
    p.#warnUnsupported(params);
    return p;
  }

  private constructor(o: FramePipelineOptions, params: StreamParams) {
    this.#o = o;
    // One style image at a time per engine (a new URL waits for the last); the byte, pixel and time caps are the operator's.
    this.#images = new ImageDecoder({ ...o.imageLimits, concurrency: 1 });
    this.#log = o.logger.child({ module: 'native/StreamEngine' });
    this.#target = params;
  }

  get params(): Readonly<StreamParams> {
    return this.#target;
  }

  /** Params the serving engine was built with (reload keys are fixed for its life). */
  get builtParams(): Readonly<StreamParams> {
    return this.#engine.params;
  }

  #warnUnsupported(p: StreamParams): void {
    const u = unsupportedOf(p, this.#engine);
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
      logger: log,
    });
    // Declared outside the try: their preprocessor sessions are closed if a later part fails.
    const controlNets: ControlNet[] = [];
    try {
      const diffusion = await StreamDiffusion.create(sessions, params, log);
      diffusion.latentPre = chains.latentPre;
      diffusion.latentPost = chains.latentPost;
      for (const cfg of params.controlnets) {
        if (cfg.enabled === false) continue;
        controlNets.push(await ControlNet.open(sessions, this.#o.modelsDir, cfg));
      }
      diffusion.controlNets = controlNets;
      const safety = await SafetyChecker.open(sessions);
      let ip: IpAdapter | null = null;
      // Kept ready on every model that supports it, so adding, removing or changing ip_adapter is a
      // hot change (spec: "fully hot-swappable"). Asked for on a model folder without an image
      // encoder, the build fails; otherwise its absence only shows when ip_adapter is added.
      if (supportsIpAdapter(params.model_id) && (params.ip_adapter || IpAdapter.available(sessions))) {
        ip = await IpAdapter.open(sessions);
      }
      if (controlNets.length > 0) log.info(`FramePipeline.build() | controlnets loaded [ids:${controlNets.map((c) => c.modelId).join(',')}]`);
      for (const c of controlNets) {
        const i = c.preprocessorInfo;
        if (!i) continue;
        const line = `FramePipeline.build() | preprocessor ${i.preprocessor} for ${c.modelId} [providers:${i.providers.join(',')}]${i.demo ? ' [DEMO model]' : ''}${i.providerNote ? ` (${i.providerNote})` : ''}`;
        if (i.demo || i.providerNote) log.warn(line);
        else log.info(line);
      }
      const e: Engine = { params, sessions, diffusion, filter, controlNets, ...NO_EXTRAS, safety, ip, ...chains };
      this.#syncIp(e);
      return e;
    } catch (err) {
      await Promise.allSettled(controlNets.map((c) => c.close()));
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
    if (d && cfg && cfg.enabled !== false && !e.ip) {
      d.setIpTokens(null);
      e.ipState = 'error';
      e.ipError = supportsIpAdapter(e.params.model_id) ? 'ip_adapter needs image_encoder/model.onnx in the model folder' : `${e.params.model_id} does not support ip_adapter`;
      return;
    }
    if (!on || !e.ip || !d) {
      d?.setIpTokens(null);
      if (!e.ip || !cfg || cfg.enabled === false) {
        e.ipState = 'off';
        e.ipError = null;
      }
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
      const images = this.#images;
      const job = loadStyleImage(url, this.#o.fetchImage, images.limits.maxBytes)
        .then((img) => ip.encode(img, images))
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

  /**
   * Takes a change planned where it was asked for (ParamsChange): its hot keys apply from the next
   * frame with their values from `target`; nothing is merged, checked or planned here. Throws for
   * a change with reload keys: those need a new StreamEngine (FramePipeline builds one in another
   * thread) and reach this one only as their hot part.
   */
  update(change: ParamsChange): { hot: string[] } {
    if (this.#state === 'closed') throw new InvalidStateError('FramePipeline closed');
    const { hot, reload } = change.plan;
    if (reload.length > 0) throw new InvalidParamsError(`reload params need a new pipeline: ${reload.join(', ')}`);
    this.#target = change.target;
    for (const k of hot) this.#hotKeys.add(k);
    // Encode new prompts now, in the background, so the frame that applies them does not wait.
    if (hot.some((k) => k === 'prompt' || k === 'negative_prompt' || k === 'guidance_scale' || k === 'cfg_type')) void this.#engine.diffusion?.prefetch(change.target);
    this.#warnUnsupported(change.target);
    return { hot };
  }

  /**
   * Fills the Stream Batch with `frame` (preprocessed as a frame would be) so the first real
   * frame already yields output: a swapped-in reload opens no lag-long gap. Three steps more than
   * the lag also run the VAE decoder three times: ORT plans its memory pattern on a session's
   * first run and allocates (and page-faults) the planned block on the next ones, which cost
   * 2–3× a normal decode on the dev VM when they landed on the first served frames.
   */
  async prime(frame: Frame): Promise<void> {
    const e = this.#engine;
    if (!e.diffusion) return;
    const { width, height } = e.params;
    const sized = resizeFrame(e.imagePre.apply(frame), width, height);
    const scratch = new Uint8Array(3 * width * height);
    for (let i = 0; i < e.diffusion.lag + 3; i++) await e.diffusion.step(sized, scratch);
  }

  /** Applies the hot params requested since the last frame. */
  async #sync(): Promise<void> {
    if (this.#hotKeys.size === 0) return;
    const hot = [...this.#hotKeys];
    this.#hotKeys.clear();
    const e = this.#engine;
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
      // conditioning_scale and preprocessor_params are the hot ControlNet fields (planUpdate).
      for (const c of e.controlNets) {
        const cfg = next.controlnets.find((x) => x.model_id === c.modelId);
        if (!cfg) continue;
        c.scale = cfg.conditioning_scale;
        const was = prev.controlnets.find((x) => x.model_id === c.modelId);
        if (JSON.stringify(was?.preprocessor_params ?? {}) !== JSON.stringify(cfg.preprocessor_params ?? {})) c.setPreprocessorParams(cfg.preprocessor_params ?? {});
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
      const run = this.#run(this.#engine, frame);
      this.#inflight = run;
      const out = await run;
      if (out) this.#st.framesOut++;
      return out;
    } catch (err) {
      this.#st.lastError = err instanceof Error ? err.message : String(err);
      this.#st.lastErrorTime = Date.now();
      throw err;
    } finally {
      this.#busy = false;
      this.#inflight = null;
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
      ms.encode = ms.unet = ms.math = ms.decode = ms.control = ms.ort = 0;
      ms.total = performance.now() - t0;
      return out;
    }
    const { width, height } = e.params;
    const sized = resizeFrame(pre, width, height);
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
    ms.control = d.control;
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

  /** Status of this one engine (a FramePipeline adds its reload book: state, restarts, logs). */
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
      restartCount: 0,
      lastRestartTime: null,
      lastRestartLogs: [],
      buildError: null,
      fallback: 'none',
      preprocessors: e.controlNets.flatMap((c) => {
        const i = c.preprocessorInfo;
        return i ? [{ preprocessor: i.preprocessor, controlnet: c.modelId, demo: i.demo, providers: i.providers, providerNote: i.providerNote }] : [];
      }),
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
      paramsWork: { ...paramsWork },
    };
  }

  /** Resolves when no style-image load is in flight. */
  async whenIdle(): Promise<void> {
    while (this.#background.size > 0) await Promise.allSettled([...this.#background]);
  }

  close(): Promise<void> {
    if (this.#closePromise) return this.#closePromise;
    this.#state = 'closed';
    this.#closePromise = (async () => {
      // A stream closed mid-frame: releasing sessions under a running ORT call aborted the whole
      // process (an uncaught Napi::Error in the run's completion), so the frame finishes first.
      await this.#inflight?.catch(() => null);
      await Promise.allSettled(this.#engine.controlNets.map((c) => c.close()));
      await this.#engine.sessions?.close();
      this.#log.info('close() | closed');
    })();
    return this.#closePromise;
  }
}
