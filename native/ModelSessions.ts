/**
 * The ONNX Runtime sessions of one model directory (diffusers/optimum layout) plus everything we
 * learn from the files: tensor dtypes, embedding width D, latent channels C, VAE scale factor f,
 * sequence length. Nothing here is hard-coded to a model family (reference/live-diffusion.md §5).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import type { Logger } from 'pino';
import { ClipTokenizer } from './ClipTokenizer.ts';
import { FUSED_IO, fuseVaeDecoder, fuseVaeEncoder, outputNames, readModel } from './FusedVae.ts';
import { InferenceError, ModelLoadError } from './errors.ts';

/** Daydream `acceleration`: 'none'/'xformers' mean plain GPU attention upstream; here they map to the default provider. */
/** Daydream's acceleration: which execution providers the sessions ask for. */
export type Acceleration = 'none' | 'xformers' | 'tensorrt';
/** ONNX Runtime execution providers we know how to ask for. */
export type ProviderName = 'cpu' | 'cuda' | 'tensorrt';

/** ONNX Runtime tuning knobs (not part of the public params). */
export interface SessionSettings {
  /** Threads per session for intra-op parallelism; default 0 = ORT's choice (all cores). */
  intraOpNumThreads?: number;
  /** Default 'all'. */
  graphOptimizationLevel?: 'disabled' | 'basic' | 'extended' | 'all';
  /** Where TensorRT caches engines (TRT EP only). Default `<modelDir>/.trt-cache`. */
  trtCacheDir?: string;
  /**
   * Let ORT's intra-op threads spin after a run. Default false: spinning steals the cores our own
   * per-frame JS (tensor conversion, scheduler math, processors) runs on, measured 10–50× slower
   * JS stages on the 2-core dev VM with spinning on.
   */
  allowSpinning?: boolean;
}

export type ModelPart = 'text_encoder' | 'unet' | 'vae_encoder' | 'vae_decoder';

/** What the model files told us. */
export interface ModelInfo {
  modelDir: string;
  /** model_index.json says `_demo: true` (tiny random-weight model). */
  demo: boolean;
  /** Text embedding width D (cross_attention_dim). */
  embedDim: number;
  /** Tokens per prompt (CLIP max_position_embeddings, 77). */
  maxLength: number;
  /** Latent channels C. */
  latentChannels: number;
  /** VAE spatial factor f, measured by running the encoder once. */
  vaeScaleFactor: number;
  /** VAE latent scaling factor (SD 0.18215, SDXL 0.13025, TAESD/demo 1.0). */
  scalingFactor: number;
  /** The encoder returns distribution parameters (mean‖logvar) instead of a sample. */
  encoderReturnsParameters: boolean;
  inputIdsType: 'int32' | 'int64';
  timestepType: 'float32' | 'int64' | 'float16';
  /**
   * ControlNet residual inputs the UNet takes (empty when it was exported without them), in the
   * order ControlNet outputs map onto them: `down_block_additional_residual_<i>`…, then
   * `mid_block_additional_residual`. Each with its channels and spatial factor relative to the latent.
   */
  residualInputs: ResidualInput[];
  /** Providers the sessions were created with, in preference order. */
  providers: ProviderName[];
  /** Set when the requested providers could not be used; says what happened. */
  providerNote: string | null;
}

/** One ControlNet residual input of the UNet. */
export interface ResidualInput {
  name: string;
  channels: number;
  /** Latent height/width divided by this gives the residual's spatial size. */
  factor: number;
}

/** UNet input names of the ControlNet residuals (diffusers `down_block_additional_residuals` tuple flattened, + mid). */
export const DOWN_RESIDUAL_PREFIX = 'down_block_additional_residual_';
export const MID_RESIDUAL = 'mid_block_additional_residual';

export interface RunTiming {
  /** Sum of time spent inside `session.run`, ms, since the last reset. */
  runMs: number;
  runs: number;
}

/** Provider preference for an `acceleration` value. */
export function providersFor(acceleration: Acceleration): ProviderName[] {
  return acceleration === 'tensorrt' ? ['tensorrt', 'cuda', 'cpu'] : ['cpu'];
}

export class ModelSessions {
  readonly info: ModelInfo;
  readonly tokenizer: ClipTokenizer;
  readonly timing: RunTiming = { runMs: 0, runs: 0 };
  readonly #sessions: Record<ModelPart, ort.InferenceSession>;
  readonly #open: (file: string) => Promise<ort.InferenceSession>;
  readonly #extra: ort.InferenceSession[] = [];
  /** Reused per-call timestep arrays (one per batch size) so the UNet call allocates nothing. */
  readonly #tsF32 = new Map<number, Float32Array>();
  readonly #tsI64 = new Map<number, BigInt64Array>();
  /**
   * Pre-allocated output tensors ORT writes into (UNet output per batch size, the encoder's
   * latent per size): the frame path allocates no output buffers, so the collector has nothing
   * to do (measured ~2 ms/frame of GC at 512² before).
   */
  readonly #outputs = new Map<string, ort.Tensor>();
  #closed = false;

  private constructor(
    info: ModelInfo,
    tokenizer: ClipTokenizer,
    sessions: Record<ModelPart, ort.InferenceSession>,
    open: (file: string) => Promise<ort.InferenceSession>,
  ) {
    this.info = info;
    this.tokenizer = tokenizer;
    this.#sessions = sessions;
    this.#open = open;
  }

  /**
   * Opens an extra model (ControlNet, safety checker, image encoder) with the providers and
   * settings of this model; released by close().
   */
  async openExtra(file: string): Promise<ort.InferenceSession> {
    if (!existsSync(file)) throw new ModelLoadError(this.info.modelDir, `missing ${file}`);
    const s = await this.#open(file);
    this.#extra.push(s);
    return s;
  }

  /** Times a `run` of an extra session into `timing` (so the overhead metric stays honest). */
  async runExtra(stage: string, s: ort.InferenceSession, feeds: Record<string, ort.Tensor>, fetches?: Record<string, ort.Tensor>): Promise<ort.InferenceSession.OnnxValueMapType> {
    const t0 = performance.now();
    try {
      return await (fetches ? s.run(feeds, fetches) : s.run(feeds));
    } catch (err) {
      throw new InferenceError(stage, (err as Error).message, { cause: err });
    } finally {
      this.timing.runMs += performance.now() - t0;
      this.timing.runs++;
    }
  }

  /**
   * Opens the four sessions. `width`/`height` are used to measure the VAE factor with one encoder
   * run (which also warms it up).
   */
  static async load(o: {
    modelDir: string;
    providers: ProviderName[];
    width: number;
    height: number;
    settings?: SessionSettings;
    /**
     * Awaited before each blocking step (session creation, probe runs). A reload passes one that
     * waits for the serving pipeline's current frame; default: one event-loop turn.
     */
    pace?: () => Promise<void>;
    /** UNet file to load instead of `<modelDir>/unet/model.onnx` (a LoRA-merged copy). */
    unetFile?: string;
    logger: Logger;
  }): Promise<ModelSessions> {
    const { modelDir, logger } = o;
    if (!existsSync(join(modelDir, 'model_index.json')) && !existsSync(join(modelDir, 'unet', 'model.onnx'))) {
      throw new ModelLoadError(modelDir, 'no model_index.json or unet/model.onnx');
    }
    const index = readJson(join(modelDir, 'model_index.json')) as { _demo?: boolean } | null;
    const pace = o.pace ?? yieldTurn;
    const cfg = (readJson(join(modelDir, 'vae_decoder', 'config.json')) ?? readJson(join(modelDir, 'vae_encoder', 'config.json'))) as { scaling_factor?: number } | null;
    // SD 1.x/2.x default when the export carries no config.
    const scalingFactor = cfg?.scaling_factor ?? 0.18215;
    const file = (part: ModelPart) => (part === 'unet' && o.unetFile ? o.unetFile : join(modelDir, part, 'model.onnx'));
    for (const part of PARTS) if (!existsSync(file(part))) throw new ModelLoadError(modelDir, `missing ${part}/model.onnx`);
    // The VAE parts take and give RGB24 bytes (FusedVae.ts).
    await pace();
    const encoder = readModel(file('vae_encoder'));
    const encOuts = outputNames(encoder);
    const latentOut = encOuts.includes('latent_sample') ? 'latent_sample' : encOuts.includes('latent_parameters') ? 'latent_parameters' : null;
    if (!latentOut) throw new ModelLoadError(modelDir, `vae_encoder outputs ${encOuts.join(',')}: need latent_sample or latent_parameters`);
    const sources: Record<ModelPart, string | Uint8Array> = {
      text_encoder: file('text_encoder'),
      unet: file('unet'),
      vae_encoder: fuseVaeEncoder(encoder, { scalingFactor, latentOut }),
      vae_decoder: fuseVaeDecoder(readModel(file('vae_decoder')), { scalingFactor }),
    };
    const { providers, note, sessions, open } = await openWithFallback(sources, o.providers, o.settings ?? {}, logger, pace, modelDir);
    const tokenizer = ClipTokenizer.fromDir(join(modelDir, 'tokenizer'));

    const meta = (s: ort.InferenceSession, name: string, io: 'in' | 'out') => {
      const list = io === 'in' ? s.inputMetadata : s.outputMetadata;
      const m = list.find((x) => x.name === name);
      if (!m || !m.isTensor) throw new ModelLoadError(modelDir, `missing tensor ${io}put '${name}'`);
      return m;
    };
    const ids = meta(sessions.text_encoder, 'input_ids', 'in');
    const ts = meta(sessions.unet, 'timestep', 'in');
    meta(sessions.unet, 'sample', 'in');
    meta(sessions.vae_decoder, FUSED_IO.latent, 'in');
    const ehs = meta(sessions.unet, 'encoder_hidden_states', 'in');
    const inputIdsType = ids.type === 'int64' ? 'int64' : ids.type === 'int32' ? 'int32' : null;
    if (!inputIdsType) throw new ModelLoadError(modelDir, `unsupported input_ids type ${ids.type}`);
    const timestepType = ts.type === 'float32' || ts.type === 'int64' || ts.type === 'float16' ? ts.type : null;
    if (!timestepType) throw new ModelLoadError(modelDir, `unsupported timestep type ${ts.type}`);
    if (ts.shape.length !== 1) {
      // optimum's default export declares a scalar timestep, which cannot carry per-slot timesteps.
      throw new ModelLoadError(modelDir, `unet timestep must be shaped [batch] for Stream Batch (got rank ${ts.shape.length}); re-export with a dynamic batch timestep`);
    }
    const seqDim = ids.shape[1];
    const maxLength = typeof seqDim === 'number' ? seqDim : tokenizer.maxLength;

    // D from the UNet input shape, else by running the text encoder once.
    let embedDim = typeof ehs.shape[2] === 'number' ? ehs.shape[2] : 0;
    if (!embedDim) {
      await pace();
      const out = await sessions.text_encoder.run({ input_ids: idsTensor(inputIdsType, tokenizer.encode(''), 1) });
      embedDim = (out.last_hidden_state as ort.Tensor).dims[2] as number;
    }
    // C and f by running the encoder once at the stream size.
    await pace();
    const probe = await sessions.vae_encoder.run({
      [FUSED_IO.rgb]: new ort.Tensor('uint8', new Uint8Array(3 * o.width * o.height), [1, o.height, o.width, 3]),
    });
    const ld = (probe[FUSED_IO.latent] as ort.Tensor).dims;
    const latentChannels = ld[1] as number;
    const vaeScaleFactor = o.height / (ld[2] as number);
    if (!Number.isInteger(vaeScaleFactor) || o.width / (ld[3] as number) !== vaeScaleFactor) {
      throw new ModelLoadError(modelDir, `VAE latent ${ld.join('x')} does not divide ${o.width}x${o.height} evenly`);
    }
    const residualInputs = residualInputsOf(modelDir, sessions.unet.inputNames);
    const info: ModelInfo = {
      modelDir,
      demo: index?._demo === true,
      embedDim,
      maxLength,
      latentChannels,
      vaeScaleFactor,
      scalingFactor,
      encoderReturnsParameters: latentOut === 'latent_parameters',
      inputIdsType,
      timestepType,
      residualInputs,
      providers,
      providerNote: note,
    };
    logger.info({ ...info }, `ModelSessions.load() | ready [dir:${modelDir}] [providers:${providers.join(',')}]${info.demo ? ' [DEMO model]' : ''}`);
    return new ModelSessions(info, tokenizer, sessions, open);
  }

  async #run(part: ModelPart, feeds: Record<string, ort.Tensor>, fetches?: Record<string, ort.Tensor>): Promise<ort.InferenceSession.OnnxValueMapType> {
    const t0 = performance.now();
    try {
      return await (fetches ? this.#sessions[part].run(feeds, fetches) : this.#sessions[part].run(feeds));
    } catch (err) {
      throw new InferenceError(part, (err as Error).message, { cause: err });
    } finally {
      this.timing.runMs += performance.now() - t0;
      this.timing.runs++;
    }
  }

  /** CLIP: ids [B, L] → last_hidden_state [B, L, D] (flattened). */
  async encodeText(ids: Int32Array, batch: number): Promise<Float32Array> {
    const out = await this.#run('text_encoder', { input_ids: idsTensor(this.info.inputIdsType, ids, batch) });
    return (out.last_hidden_state as ort.Tensor).data as Float32Array;
  }

  /** A reused output tensor for `key` (created on first use). */
  #output(key: string, dims: number[]): ort.Tensor {
    let t = this.#outputs.get(key);
    if (!t) this.#outputs.set(key, (t = new ort.Tensor('float32', new Float32Array(dims.reduce((a, b) => a * b, 1)), dims)));
    return t;
  }

  /**
   * VAE encode: RGB24 bytes [H,W,3] → latent [1,C,h,w] already multiplied by the scaling factor
   * (the mean when the export returns parameters). The result is a buffer reused by the next
   * call: read or copy it before encoding again.
   */
  async encodeRgb(rgb: Uint8Array, width: number, height: number): Promise<Float32Array> {
    const f = this.info.vaeScaleFactor;
    const out = this.#output(`latent:${width}x${height}`, [1, this.info.latentChannels, height / f, width / f]);
    await this.#run('vae_encoder', { [FUSED_IO.rgb]: new ort.Tensor('uint8', rgb, [1, height, width, 3]) }, { [FUSED_IO.latent]: out });
    return out.data as Float32Array;
  }

  /** Timestep tensor of batch B over a reused buffer. */
  timestepTensor(timesteps: readonly number[]): ort.Tensor {
    const B = timesteps.length;
    if (this.info.timestepType === 'int64') {
      let a = this.#tsI64.get(B);
      if (!a) this.#tsI64.set(B, (a = new BigInt64Array(B)));
      for (let i = 0; i < B; i++) a[i] = BigInt(Math.round(timesteps[i] as number));
      return new ort.Tensor('int64', a, [B]);
    }
    if (this.info.timestepType === 'float32') {
      let a = this.#tsF32.get(B);
      if (!a) this.#tsF32.set(B, (a = new Float32Array(B)));
      for (let i = 0; i < B; i++) a[i] = timesteps[i] as number;
      return new ort.Tensor('float32', a, [B]);
    }
    throw new InferenceError('unet', 'float16 timestep models are not supported yet (export in float32)');
  }

  /**
   * UNet: one batched call. `embeds` is [B, S, D] flattened (S = 77, or more with IP-Adapter
   * tokens); `residuals` are the ControlNet residuals in `info.residualInputs` order (required when
   * the UNet takes them: pass zeros for "no control").
   */
  async predictNoise(
    sample: Float32Array,
    dims: [number, number, number, number],
    timesteps: readonly number[],
    embeds: Float32Array,
    residuals: readonly ort.Tensor[] = [],
  ): Promise<Float32Array> {
    const B = dims[0];
    const D = this.info.embedDim;
    const feeds: Record<string, ort.Tensor> = {
      sample: new ort.Tensor('float32', sample.length === B * dims[1] * dims[2] * dims[3] ? sample : sample.subarray(0, B * dims[1] * dims[2] * dims[3]), dims),
      timestep: this.timestepTensor(timesteps),
      encoder_hidden_states: new ort.Tensor('float32', embeds, [B, embeds.length / (B * D), D]),
    };
    const ri = this.info.residualInputs;
    if (ri.length > 0) {
      if (residuals.length !== ri.length) throw new InferenceError('unet', `expected ${ri.length} ControlNet residuals, got ${residuals.length}`);
      for (let i = 0; i < ri.length; i++) feeds[(ri[i] as ResidualInput).name] = residuals[i] as ort.Tensor;
    }
    // The noise prediction has the sample's shape; the buffer is reused by the next call.
    const out = this.#output(`eps:${dims.join('x')}`, dims);
    await this.#run('unet', feeds, { out_sample: out });
    return out.data as Float32Array;
  }

  /** VAE decode: latent [1,C,h,w] as the UNet sees it (scaled) → RGB24 bytes written into `out` (3·W·H). */
  async decodeRgb(latent: Float32Array, h: number, w: number, out: Uint8Array): Promise<Uint8Array> {
    const f = this.info.vaeScaleFactor;
    await this.#run(
      'vae_decoder',
      { [FUSED_IO.latent]: new ort.Tensor('float32', latent, [1, this.info.latentChannels, h, w]) },
      { [FUSED_IO.rgb]: new ort.Tensor('uint8', out, [1, h * f, w * f, 3]) },
    );
    return out;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const s of [...Object.values(this.#sessions), ...this.#extra]) {
      try {
        await s.release();
      } catch {
        // Every session gets its release even if one fails.
      }
    }
  }
}

function idsTensor(type: 'int32' | 'int64', ids: Int32Array, batch: number): ort.Tensor {
  const L = ids.length / batch;
  return type === 'int32'
    ? new ort.Tensor('int32', ids, [batch, L])
    : new ort.Tensor('int64', BigInt64Array.from(ids, (v) => BigInt(v)), [batch, L]);
}

function readJson(path: string): unknown {
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as unknown) : null;
}

const PARTS: ModelPart[] = ['text_encoder', 'unet', 'vae_encoder', 'vae_decoder'];

/**
 * Opens all parts with the requested providers; if that fails (no CUDA/TensorRT binaries, no GPU)
 * falls back to CPU and returns a note saying so — never silently.
 */
async function openWithFallback(
  sources: Record<ModelPart, string | Uint8Array>,
  wanted: ProviderName[],
  settings: SessionSettings,
  logger: Logger,
  pace: () => Promise<void>,
  modelDir: string,
): Promise<{
  providers: ProviderName[];
  note: string | null;
  sessions: Record<ModelPart, ort.InferenceSession>;
  open: (file: string) => Promise<ort.InferenceSession>;
}> {
  const optionsFor = (providers: ProviderName[]): ort.InferenceSession.SessionOptions => {
    const eps: ort.InferenceSession.ExecutionProviderConfig[] = providers.map((p) =>
      p === 'tensorrt'
        ? {
            name: 'tensorrt',
            trt_engine_cache_enable: true,
            trt_timing_cache_enable: true,
            trt_engine_cache_path: settings.trtCacheDir ?? join(modelDir, '.trt-cache'),
          } as ort.InferenceSession.ExecutionProviderConfig
        : p,
    );
    const opts: ort.InferenceSession.SessionOptions = {
      executionProviders: eps,
      graphOptimizationLevel: settings.graphOptimizationLevel ?? 'all',
      ...(settings.intraOpNumThreads ? { intraOpNumThreads: settings.intraOpNumThreads } : {}),
      extra: { session: { intra_op: { allow_spinning: settings.allowSpinning ? '1' : '0' }, inter_op: { allow_spinning: settings.allowSpinning ? '1' : '0' } } },
    };
    return opts;
  };
  const open = async (providers: ProviderName[]) => {
    const opts = optionsFor(providers);
    const out = {} as Record<ModelPart, ort.InferenceSession>;
    try {
      for (const part of PARTS) {
        // Session creation runs synchronously on the JS thread inside ORT's setImmediate: let a
        // serving pipeline's frame go between parts (reload builds run beside it).
        await pace();
        const src = sources[part];
        out[part] = typeof src === 'string' ? await ort.InferenceSession.create(src, opts) : await ort.InferenceSession.create(src, opts);
      }
    } catch (err) {
      await Promise.allSettled(Object.values(out).map((s) => s.release()));
      throw err;
    }
    return out;
  };
  const result = (providers: ProviderName[], note: string | null, sessions: Record<ModelPart, ort.InferenceSession>) => {
    const opts = optionsFor(providers);
    return { providers, note, sessions, open: (file: string) => ort.InferenceSession.create(file, opts) };
  };
  if (wanted.length === 1 && wanted[0] === 'cpu') return result(['cpu'], null, await open(['cpu']));
  const available = new Set(ort.listSupportedBackends().map((b) => b.name));
  const usable = wanted.filter((p) => p === 'cpu' || available.has(p));
  try {
    if (usable.some((p) => p !== 'cpu')) return result(usable, null, await open(usable));
  } catch (err) {
    if (err instanceof ModelLoadError) throw err;
    const note = `providers ${usable.join(',')} failed (${firstLine((err as Error).message)}); running on cpu`;
    warnOnce(logger, `providers-failed:${usable.join(',')}`, `ModelSessions.load() | ${note}`);
    return result(['cpu'], note, await open(['cpu']));
  }
  const note = `providers ${wanted.filter((p) => p !== 'cpu').join(',')} not available in this onnxruntime-node build; running on cpu`;
  warnOnce(logger, `providers-missing:${wanted.join(',')}`, `ModelSessions.load() | ${note}`);
  return result(['cpu'], note, await open(['cpu']));
}

/**
 * Provider fallbacks already logged at warn in this thread. A node without TensorRT falls back on
 * every stream it opens; operators need one line saying so, not one (with a stack) per stream.
 * The `once` field lets EngineThread apply the same rule across pipeline worker threads; later
 * repeats go out at debug. The per-stream status still carries the note.
 */
const warned = new Set<string>();
function warnOnce(logger: Logger, key: string, msg: string): void {
  if (warned.has(key)) {
    logger.debug({ once: key }, msg);
    return;
  }
  warned.add(key);
  logger.warn({ once: key }, `${msg} (logged once per process)`);
}

function firstLine(s: string): string {
  return s.split('\n', 1)[0]!.slice(0, 300);
}

/** Lets queued macrotasks (a serving pipeline's ORT runs) go first. */
export function yieldTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * The UNet's ControlNet residual inputs with their shapes. Shapes follow diffusers'
 * UNet2DConditionModel from `unet/config.json` (block_out_channels, layers_per_block): conv_in
 * (factor 1), then per down block `layers_per_block` residuals plus a downsampler residual on all
 * but the last block, then the mid block at the last block's channels.
 */
function residualInputsOf(modelDir: string, inputNames: readonly string[]): ResidualInput[] {
  const downs = inputNames
    .filter((n) => n.startsWith(DOWN_RESIDUAL_PREFIX))
    .sort((a, b) => Number(a.slice(DOWN_RESIDUAL_PREFIX.length)) - Number(b.slice(DOWN_RESIDUAL_PREFIX.length)));
  const hasMid = inputNames.includes(MID_RESIDUAL);
  if (downs.length === 0 && !hasMid) return [];
  const cfg = readJson(join(modelDir, 'unet', 'config.json')) as { block_out_channels?: number[]; layers_per_block?: number } | null;
  const blocks = cfg?.block_out_channels;
  const layers = cfg?.layers_per_block ?? 2;
  if (!blocks || blocks.length === 0) throw new ModelLoadError(modelDir, 'unet takes ControlNet residuals but unet/config.json has no block_out_channels');
  const shapes: { channels: number; factor: number }[] = [{ channels: blocks[0] as number, factor: 1 }];
  blocks.forEach((ch, i) => {
    for (let l = 0; l < layers; l++) shapes.push({ channels: ch, factor: 2 ** i });
    if (i < blocks.length - 1) shapes.push({ channels: ch, factor: 2 ** (i + 1) });
  });
  if (shapes.length !== downs.length || !hasMid) {
    throw new ModelLoadError(modelDir, `unet has ${downs.length} down residual inputs${hasMid ? '' : ' and no mid'}; config implies ${shapes.length} + mid`);
  }
  const last = blocks[blocks.length - 1] as number;
  return [
    ...downs.map((name, i) => ({ name, ...(shapes[i] as { channels: number; factor: number }) })),
    { name: MID_RESIDUAL, channels: last, factor: 2 ** (blocks.length - 1) },
  ];
}
