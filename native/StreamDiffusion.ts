/**
 * StreamDiffusion's per-frame algorithm over ONNX Runtime (reference/live-diffusion.md §1.3):
 * VAE encode → (ControlNets) → one batched UNet call (Stream Batch; +1 slot for RCFG 'initialize',
 * ×2 for 'full') → elementwise LCM boundary step → VAE decode. All per-slot scalars are
 * precomputed; noise is fixed per seed; prompt embeddings are cached per prompt, encoded in the
 * background when a new prompt arrives and swapped in on the first frame after they are ready.
 *
 * Per-frame buffers are allocated once per batch size and reused: the frame path allocates only
 * what ONNX Runtime returns.
 */
import * as ort from 'onnxruntime-node';
import type { Logger } from 'pino';
import { blendEmbeddings, blendNoise } from './Blend.ts';
import { zeroResiduals, type ControlNet } from './ControlNet.ts';
import type { Frame, LatentTensor } from './Frame.ts';
import { LcmScheduler, type StepTables } from './LcmScheduler.ts';
import type { ModelSessions } from './ModelSessions.ts';
import type { ProcessorChain } from './processors/ProcessorChain.ts';
import { gaussianNoise, SeededRandom } from './SeededNoise.ts';
import type { CfgType, StreamParams } from './params/index.ts';

/** Milliseconds spent per stage on the last frame. */
export interface DiffusionStageMs {
  encode: number;
  /** UNet plus ControlNet runs (their preprocessors included; `control` says how much of it those took). */
  unet: number;
  /** ControlNet preprocessors (canny, depth, pose, soft edge …) on this frame. */
  control: number;
  /** Elementwise scheduler math and buffer shifts. */
  math: number;
  decode: number;
}

const IDENTITY_CHAIN: ProcessorChain<LatentTensor> = { types: [], empty: true, apply: (x) => x, observeOutput: () => {}, reset: () => {} };

type Dims4 = [number, number, number, number];

/** What the prompt embeddings were built from; equal keys mean nothing to re-blend. */
function promptKey(p: StreamParams, needUncond: boolean): string {
  return JSON.stringify([p.prompt, p.prompt_interpolation_method, p.normalize_prompt_weights, needUncond ? p.negative_prompt : null]);
}

/**
 * Per-slot scalars of one LCM step, folded so the per-element loops multiply instead of divide:
 * c_out·(x − β·ε)/α + c_skip·x = k1·x − k2·ε with k1 = c_out/α + c_skip and k2 = c_out·β/α.
 */
interface SlotStep {
  k1: number;
  k2: number;
  /** β of this slot (the RCFG update scales the stock noise by it). */
  b: number;
  /** α and β of the next slot's timestep (1 past the last slot). */
  an: number;
  bn: number;
}

function slotStep(a: number, b: number, cOut: number, cSkip: number, an: number, bn: number): SlotStep {
  return { k1: cOut / a + cSkip, k2: (cOut * b) / a, b, an, bn };
}

// The per-element loops are small synchronous functions with the per-frame flags decided outside
// them, so each inner loop is branch-free and divide-free (three divisions per element made the
// scheduler math ~1.3 ms of every 512² frame on the dev VM).

/** Guided prediction: out = unc·k + g·(text − unc·k) with unc from `uncond` (k = delta for RCFG, 1 for full CFG). */
function guide(out: Float32Array, uncond: Float32Array, text: Float32Array, count: number, g: number, k: number): Float32Array {
  for (let i = 0; i < count; i++) {
    const unc = (uncond[i] as number) * k;
    out[i] = unc + g * ((text[i] as number) - unc);
  }
  return out;
}

/**
 * x0 = k1·x − k2·ε over [begin, end): the last slot (`none`) writes it to `x0` (the frame's
 * output); the others only advance it into the next slot of `x` (`plain`: α_next·x0, `noise`:
 * + β_next·init), since nothing reads their x0 (one latent less of memory traffic per slot).
 * Math.fround keeps the float32 rounding x0 had when it was read back from a Float32Array.
 */
function lcmStep(x: Float32Array, pred: Float32Array, x0: Float32Array, init: Float32Array, begin: number, end: number, t: SlotStep, advance: 'none' | 'plain' | 'noise', L: number): void {
  const { k1, k2, an, bn } = t;
  if (advance === 'none') {
    for (let k = begin; k < end; k++) x0[k] = k1 * (x[k] as number) - k2 * (pred[k] as number);
  } else if (advance === 'noise') {
    for (let k = begin; k < end; k++) {
      const y = Math.fround(k1 * (x[k] as number) - k2 * (pred[k] as number));
      x[k + L] = an * y + bn * (init[k + L] as number);
    }
  } else {
    for (let k = begin; k < end; k++) x[k + L] = an * Math.fround(k1 * (x[k] as number) - k2 * (pred[k] as number));
  }
}

/**
 * RCFG residual-noise update of a single-slot batch (nothing shifts, the noise stays in place):
 * next[k] = init[k] + (α_next/β_next)·(k1·β·stock − k2·ε). Several slots use lcmRcfgStep.
 */
function rcfgStep(stock: Float32Array, pred: Float32Array, next: Float32Array, init: Float32Array, begin: number, end: number, t: SlotStep): void {
  const { k1, k2, b } = t;
  const r = t.an / t.bn;
  for (let k = begin; k < end; k++) {
    const dx = k1 * b * (stock[k] as number) - k2 * (pred[k] as number);
    next[k] = (init[k] as number) + r * dx;
  }
}

/**
 * lcmStep's advance and rcfgStep's shifted update of one slot that is not the last, in one pass:
 * both read the same ε (k2·ε computed once) and the next slot's seed noise, so fusing them reads
 * each of those once (the math is memory-bound: a 512² frame's latents leave the cache during
 * the UNet run). Same expressions as the two loops, so the same bytes.
 */
function lcmRcfgStep(x: Float32Array, pred: Float32Array, stock: Float32Array, next: Float32Array, init: Float32Array, begin: number, end: number, t: SlotStep, noise: boolean, L: number): void {
  const { k1, k2, an, bn } = t;
  const kb = k1 * t.b;
  const r = an / bn;
  if (noise) {
    for (let k = begin; k < end; k++) {
      const kp = k2 * (pred[k] as number);
      const nz = init[k + L] as number;
      x[k + L] = an * Math.fround(k1 * (x[k] as number) - kp) + bn * nz;
      next[k + L] = nz + r * (kb * (stock[k] as number) - kp);
    }
  } else {
    for (let k = begin; k < end; k++) {
      const kp = k2 * (pred[k] as number);
      x[k + L] = an * Math.fround(k1 * (x[k] as number) - kp);
      next[k + L] = (init[k + L] as number) + r * (kb * (stock[k] as number) - kp);
    }
  }
}

export class StreamDiffusion {
  readonly sessions: ModelSessions;
  readonly width: number;
  readonly height: number;
  readonly latentWidth: number;
  readonly latentHeight: number;
  /** Floats in one latent (C·h·w). */
  readonly latentSize: number;
  readonly stageMs: DiffusionStageMs = { encode: 0, unet: 0, control: 0, math: 0, decode: 0 };
  latentPre: ProcessorChain<LatentTensor> = IDENTITY_CHAIN;
  latentPost: ProcessorChain<LatentTensor> = IDENTITY_CHAIN;
  /** Loaded ControlNets (set by the pipeline at build; their scales are hot). */
  controlNets: ControlNet[] = [];
  /** Last background prompt-encoding error, or null. */
  promptError: string | null = null;

  readonly #scheduler = new LcmScheduler();
  readonly #logger: Logger;
  readonly #promptCache = new Map<string, Float32Array>();
  readonly #encoding = new Map<string, Promise<void>>();
  readonly #noiseCache = new Map<number, Float32Array>();
  #params!: StreamParams;
  #tables!: StepTables;
  #n = 0;
  #init: Float32Array = new Float32Array(0);
  #stock = new Float32Array(0);
  /**
   * The stock already holds next frame's shifted residual noise (the fused step writes it that
   * way); false after a flush, a seed change or a frame without the RCFG update.
   */
  #stockShifted = false;
  /** Frames pushed into the batch since the last flush; outputs start at n−1. */
  #filled = 0;
  #cond: Float32Array = new Float32Array(0);
  #uncond: Float32Array = new Float32Array(0);
  /** The prompt key #cond/#uncond were built from, and the one wanted now. */
  #builtKey = '';
  #wantKey = '';
  /** IP-Adapter tokens [K, D] (already scaled) appended to every conditional slot, or null. */
  #ipTokens: Float32Array | null = null;
  /** Embeddings laid out for the UNet batch of the current cfg mode. */
  #unetEmbeds = new Float32Array(0);
  #freshNoise = new SeededRandom(0);
  // Reused per-frame buffers (sized in #alloc).
  #xIn = new Float32Array(0);
  #sample = new Float32Array(0);
  #x0 = new Float32Array(0);
  #next = new Float32Array(0);
  #pred = new Float32Array(0);
  #seqX = new Float32Array(0);
  #ts: number[] = [];
  readonly #zeros = new Map<number, ort.Tensor[]>();

  private constructor(sessions: ModelSessions, params: StreamParams, logger: Logger) {
    this.sessions = sessions;
    this.#logger = logger;
    const f = sessions.info.vaeScaleFactor;
    this.width = params.width;
    this.height = params.height;
    this.latentWidth = params.width / f;
    this.latentHeight = params.height / f;
    this.latentSize = sessions.info.latentChannels * this.latentWidth * this.latentHeight;
  }

  /** Builds the object and encodes the initial prompts (awaited: no frame runs without them). */
  static async create(sessions: ModelSessions, params: StreamParams, logger: Logger): Promise<StreamDiffusion> {
    const sd = new StreamDiffusion(sessions, params, logger);
    await sd.prefetch(params);
    await sd.apply(params);
    return sd;
  }

  /** Stream Batch output lag in frames: len(t_index_list) − 1 (0 without the denoising batch). */
  get lag(): number {
    return this.#params.use_denoising_batch ? this.#n - 1 : 0;
  }

  /** The cfg mode actually active: guidance_scale ≤ 1 disables every CFG path. */
  get activeCfg(): CfgType {
    return this.#params.guidance_scale > 1 ? (this.#params.cfg_type ?? 'self') : 'none';
  }

  /** True while the embeddings in use lag behind the requested prompt (background encode). */
  get promptPending(): boolean {
    return this.#builtKey !== this.#wantKey;
  }

  /** Empties the Stream Batch: the next lag frames return null again. */
  flush(): void {
    // Slots 1.. of the UNet input are the Stream Batch's in-flight latents.
    this.#xIn.fill(0);
    this.#stock.fill(0);
    this.#stockShifted = false;
    this.#filled = 0;
  }

  /**
   * Starts encoding the prompts `next` needs, off the frame path (the text encoder runs between
   * frames). Resolves when they are cached; never rejects (errors land in `promptError`).
   */
  prefetch(next: StreamParams): Promise<void> {
    const needUncond = next.guidance_scale > 1 && ((next.cfg_type ?? 'self') === 'full' || next.cfg_type === 'initialize');
    const prompts = typeof next.prompt === 'string' ? [next.prompt] : next.prompt.map(([p]) => p);
    const want = [...new Set([...prompts, ...(needUncond ? [next.negative_prompt] : [])])];
    const missing = want.filter((p) => !this.#promptCache.has(p) && !this.#encoding.has(p));
    const waits = want.map((p) => this.#encoding.get(p)).filter((x): x is Promise<void> => x !== undefined);
    if (missing.length > 0) {
      const job = this.#encodePrompts(missing).then(
        () => {
          this.promptError = null;
        },
        (err: unknown) => {
          this.promptError = err instanceof Error ? err.message : String(err);
          this.#logger.error({ err }, 'StreamDiffusion.prefetch() | prompt encoding failed, keeping the previous prompt');
        },
      );
      const done = job.finally(() => {
        for (const p of missing) this.#encoding.delete(p);
      });
      for (const p of missing) this.#encoding.set(p, done);
      waits.push(done);
    }
    return Promise.all(waits).then(() => undefined);
  }

  /**
   * Applies (hot) params: recomputes only what changed. Width/height/model are fixed for the life
   * of this object (they are reload keys). Prompts not yet encoded are encoded in the background
   * and swapped in by the first frame after they are ready; until then the previous prompt serves.
   */
  async apply(next: StreamParams): Promise<void> {
    const prev = this.#params as StreamParams | undefined;
    const changed = (k: keyof StreamParams) => !prev || JSON.stringify(prev[k]) !== JSON.stringify(next[k]);
    this.#params = next;
    const L = this.latentSize;
    if (changed('num_inference_steps') || changed('t_index_list')) {
      this.#tables = this.#scheduler.tables(next.num_inference_steps, next.t_index_list);
      const n = next.t_index_list.length;
      if (n !== this.#n) {
        // Batch size changed: reallocate and flush, the in-flight latents have no slot any more.
        this.#n = n;
        this.#alloc(n);
        this.#filled = 0;
      }
    }
    if (changed('seed') || changed('seed_interpolation_method') || changed('normalize_seed_weights') || this.#init.length !== this.#n * L) {
      const seeds: [number, number][] = typeof next.seed === 'number' ? [[next.seed, 1]] : next.seed;
      const noises = seeds.map(([s]) => this.#noiseFor(s));
      this.#init = blendNoise(noises, seeds.map(([, w]) => w), { method: next.seed_interpolation_method, normalize: next.normalize_seed_weights }).subarray(0, this.#n * L);
      this.#stock.fill(0);
      this.#stockShifted = false;
      this.#freshNoise = new SeededRandom((seeds[0]?.[0] ?? 0) ^ 0x5eed);
    }
    const needUncond = this.activeCfg === 'full' || this.activeCfg === 'initialize';
    this.#wantKey = promptKey(next, needUncond);
    // A cfg mode that newly needs the negative prompt cannot run a frame without it: wait (rare).
    if (needUncond && this.#uncond.length === 0) await this.prefetch(next);
    if (!this.#refreshEmbeds()) void this.prefetch(next).then(() => this.#refreshEmbeds());
    this.#layoutEmbeds();
  }

  /** Sets (or clears) the IP-Adapter tokens [K·D], already multiplied by the adapter scale. */
  setIpTokens(tokens: Float32Array | null): void {
    this.#ipTokens = tokens;
    this.#layoutEmbeds();
  }

  #alloc(n: number): void {
    const L = this.latentSize;
    this.#stock = new Float32Array(n * L);
    this.#stockShifted = false;
    this.#xIn = new Float32Array(n * L);
    this.#sample = new Float32Array(2 * n * L);
    this.#x0 = new Float32Array(n * L);
    this.#next = new Float32Array(n * L);
    this.#pred = new Float32Array(n * L);
    this.#seqX = new Float32Array(L);
  }

  /**
   * Re-blends the embeddings when the wanted prompt key differs from the built one and every
   * prompt is cached. Returns false when some prompt still has to be encoded.
   */
  #refreshEmbeds(): boolean {
    if (this.#builtKey === this.#wantKey && this.#cond.length > 0) return true;
    const p = this.#params;
    const needUncond = this.activeCfg === 'full' || this.activeCfg === 'initialize';
    if (promptKey(p, needUncond) !== this.#wantKey) return false;
    const prompts: [string, number][] = typeof p.prompt === 'string' ? [[p.prompt, 1]] : p.prompt;
    const embeds = prompts.map(([s]) => this.#promptCache.get(s));
    const uncond = needUncond ? this.#promptCache.get(p.negative_prompt) : undefined;
    if (embeds.some((e) => !e) || (needUncond && !uncond)) return false;
    this.#cond = blendEmbeddings(embeds as Float32Array[], prompts.map(([, w]) => w), { method: p.prompt_interpolation_method, normalize: p.normalize_prompt_weights });
    if (uncond) this.#uncond = uncond;
    this.#builtKey = this.#wantKey;
    this.#layoutEmbeds();
    return true;
  }

  #noiseFor(seed: number): Float32Array {
    const size = 4 * this.latentSize; // the largest batch (4 slots); slots use prefixes
    let x = this.#noiseCache.get(seed);
    if (!x || x.length < size) {
      x = gaussianNoise(seed, size);
      this.#noiseCache.set(seed, x);
    }
    return x;
  }

  /** Encodes prompts not yet cached, in one text-encoder call. */
  async #encodePrompts(prompts: string[]): Promise<void> {
    const missing = [...new Set(prompts)].filter((p) => !this.#promptCache.has(p));
    if (missing.length === 0) return;
    const tok = this.sessions.tokenizer;
    const L = this.sessions.info.maxLength;
    const ids = new Int32Array(missing.length * L);
    missing.forEach((p, i) => ids.set(tok.encode(p).subarray(0, L), i * L));
    const out = await this.sessions.encodeText(ids, missing.length);
    const per = out.length / missing.length;
    missing.forEach((p, i) => this.#promptCache.set(p, out.slice(i * per, (i + 1) * per)));
    this.#logger.debug(`StreamDiffusion.prefetch() | encoded prompts [count:${missing.length}]`);
  }

  /** Text tokens (+ IP-Adapter tokens) of one slot. */
  #slot(text: Float32Array, cond: boolean): Float32Array {
    const ip = this.#ipTokens;
    if (!ip) return text;
    const out = new Float32Array(text.length + ip.length);
    out.set(text, 0);
    // The negative side gets zero image tokens (IP-Adapter's uncond image embedding).
    if (cond) out.set(ip, text.length);
    return out;
  }

  #layoutEmbeds(): void {
    if (this.#cond.length === 0 || !this.#params) return;
    const n = this.#n;
    const cond = this.#slot(this.#cond, true);
    const uncond = this.#uncond.length > 0 ? this.#slot(this.#uncond, false) : this.#uncond;
    const E = cond.length;
    const mode = this.activeCfg;
    const slots: Float32Array[] = [];
    if (mode === 'full') for (let i = 0; i < n; i++) slots.push(uncond);
    if (mode === 'initialize') slots.push(uncond);
    for (let i = 0; i < n; i++) slots.push(cond);
    // Sequential mode runs one slot (+ its uncond) per call: [uncond?, cond].
    const layout = this.#params.use_denoising_batch ? slots : mode === 'none' || mode === 'self' ? [cond] : [uncond, cond];
    const out = new Float32Array(layout.length * E);
    layout.forEach((s, i) => out.set(s, i * E));
    this.#unetEmbeds = out;
  }

  /**
   * One frame: RGB24 `frame` at the engine size → the output picture as RGB24 written into `out`
   * (3·W·H bytes), or null while the Stream Batch is still filling after a flush (`out` is then
   * untouched). The frame is also the ControlNets' input. Pixel conversion and latent scaling run
   * inside the VAE graphs (FusedVae.ts).
   */
  async step(frame: Frame, out: Uint8Array): Promise<Uint8Array | null> {
    if (this.#builtKey !== this.#wantKey) this.#refreshEmbeds();
    let t0 = performance.now();
    const z0 = await this.sessions.encodeRgb(frame.data, this.width, this.height);
    // Latent processors may keep what they are given (feedback): hand them a copy.
    const z = this.latentPre.empty ? z0 : this.latentPre.apply({ data: z0.slice(), dims: this.#dims(1) }).data;
    let t1 = performance.now();
    this.stageMs.encode = t1 - t0;
    this.stageMs.unet = 0;
    this.stageMs.control = 0;
    this.stageMs.math = 0;

    const x0 = this.#params.use_denoising_batch ? await this.#batchStep(z, frame) : await this.#sequentialStep(z, frame);
    if (!x0) return null;

    t0 = performance.now();
    const post = this.latentPost.empty ? x0 : this.latentPost.apply({ data: x0.slice(), dims: this.#dims(1) }).data;
    await this.sessions.decodeRgb(post, this.latentHeight, this.latentWidth, out);
    t1 = performance.now();
    this.stageMs.decode = t1 - t0;
    return out;
  }

  #dims(b: number): Dims4 {
    return [b, this.sessions.info.latentChannels, this.latentHeight, this.latentWidth];
  }

  /**
   * The UNet call with ControlNet residuals: each ControlNet with a non-zero scale and at least
   * one gated-in batch entry runs once on the whole batch; entries outside its guidance window are
   * zeroed; several ControlNets sum (diffusers MultiControlNet).
   */
  async #unet(sample: Float32Array, ts: readonly number[], tIdx: readonly number[], frame: Frame | undefined): Promise<Float32Array> {
    const s = this.sessions;
    const B = ts.length;
    const dims = this.#dims(B);
    const view = sample.length === B * this.latentSize ? sample : sample.subarray(0, B * this.latentSize);
    let residuals: ort.Tensor[] = [];
    if (s.info.residualInputs.length > 0) {
      let zeros = this.#zeros.get(B);
      if (!zeros) this.#zeros.set(B, (zeros = zeroResiduals(s.info.residualInputs, B, this.latentHeight, this.latentWidth)));
      residuals = zeros;
      const steps = this.#params.num_inference_steps;
      const active = frame ? this.controlNets.filter((c) => c.scale !== 0 && tIdx.some((t) => c.activeAt(t, steps))) : [];
      if (active.length > 0) {
        const sampleT = new ort.Tensor('float32', view, dims);
        const tsT = s.timestepTensor(ts);
        const ehs = new ort.Tensor('float32', this.#unetEmbeds, [B, this.#unetEmbeds.length / (B * s.info.embedDim), s.info.embedDim]);
        // The first ControlNet's residual buffers carry the sum (no accumulator to zero and copy
        // into: a real one's residuals are ~34 MB per batch entry); slots outside a ControlNet's
        // guidance window get nothing from it.
        let sum: Float32Array[] | null = null;
        for (const c of active) {
          const cond = await c.prepare(frame as Frame, B);
          this.stageMs.control += c.lastPrepareMs;
          const outs = (await c.run(sampleT, tsT, ehs, cond)).map((t) => t.data as Float32Array);
          for (let b = 0; b < B; b++) {
            if (c.activeAt(tIdx[b] as number, steps)) continue;
            for (const o of outs) o.fill(0, (b * o.length) / B, ((b + 1) * o.length) / B);
          }
          if (!sum) {
            sum = outs;
            continue;
          }
          for (let r = 0; r < outs.length; r++) {
            const src = outs[r] as Float32Array;
            const dst = sum[r] as Float32Array;
            for (let i = 0; i < dst.length; i++) dst[i] = (dst[i] as number) + (src[i] as number);
          }
        }
        residuals = (sum as Float32Array[]).map((a, r) => new ort.Tensor('float32', a, (zeros[r] as ort.Tensor).dims));
      }
    }
    return s.predictNoise(view, dims, ts, this.#unetEmbeds, residuals);
  }

  async #batchStep(z: Float32Array, frame: Frame | undefined): Promise<Float32Array | null> {
    const n = this.#n;
    const L = this.latentSize;
    const { alpha, beta, cSkip, cOut, subTimesteps } = this.#tables;
    const init = this.#init;
    const stock = this.#stock;
    const mode = this.activeCfg;
    const rcfg = (this.#params.cfg_type ?? 'self') === 'self' || this.#params.cfg_type === 'initialize';
    const tList = this.#params.t_index_list;
    let tm = performance.now();
    // Slot 0: the new frame noised to t0 (always, whatever do_add_noise says); slots 1.. already
    // hold the in-flight latents (the previous frame's step wrote them there).
    const xIn = this.#xIn;
    const a0 = alpha[0] as number;
    const b0 = beta[0] as number;
    for (let i = 0; i < L; i++) xIn[i] = a0 * (z[i] as number) + b0 * (init[i] as number);
    if (n > 1 && !this.#stockShifted) {
      // The residual noise travels with its latent.
      stock.copyWithin(L, 0, (n - 1) * L);
      stock.set(init.subarray(0, L), 0);
    }
    this.#stockShifted = false;
    let sample = xIn;
    const ts = this.#ts;
    ts.length = 0;
    const tIdx: number[] = [];
    if (mode === 'initialize') {
      sample = this.#sample;
      sample.set(xIn.subarray(0, L), 0);
      sample.set(xIn, L);
      ts.push(subTimesteps[0] as number);
      tIdx.push(tList[0] as number);
    } else if (mode === 'full') {
      sample = this.#sample;
      sample.set(xIn, 0);
      sample.set(xIn, n * L);
      for (let s = 0; s < n; s++) {
        ts.push(subTimesteps[s] as number);
        tIdx.push(tList[s] as number);
      }
    }
    for (let s = 0; s < n; s++) {
      ts.push(subTimesteps[s] as number);
      tIdx.push(tList[s] as number);
    }
    this.stageMs.math += performance.now() - tm;
    const tu = performance.now();
    const eps = await this.#unet(sample, ts, tIdx, frame);
    this.stageMs.unet = performance.now() - tu;
    tm = performance.now();
    let epsText = eps;
    if (mode === 'initialize') {
      epsText = eps.subarray(L);
      stock.set(eps.subarray(0, L), 0);
    } else if (mode === 'full') {
      epsText = eps.subarray(n * L);
    }
    const g = this.#params.guidance_scale;
    const delta = this.#params.delta;
    const addNoise = this.#params.do_add_noise;
    const x0 = this.#x0;
    const next = this.#next;
    const pred = mode === 'none' ? epsText : guide(this.#pred, mode === 'full' ? eps : stock, epsText, n * L, g, mode === 'full' ? 1 : delta);
    // Per slot: the LCM boundary step with the batch advance (slot s becomes slot s+1 at the next
    // timestep), then the RCFG residual-noise update (in the same pass where both run). Slots run
    // last to first so the advance writes slot s+1 of the UNet input in place (already read), and
    // the RCFG noise is written shifted by one slot, as the next frame needs it: no copies between
    // frames.
    for (let s = n - 1; s >= 0; s--) {
      const last = s + 1 === n;
      // The next slot's timestep (α=β=1 past the last one, for the RCFG update).
      const slot = slotStep(alpha[s] as number, beta[s] as number, cOut[s] as number, cSkip[s] as number, last ? 1 : (alpha[s + 1] as number), last ? 1 : (beta[s + 1] as number));
      const begin = s * L;
      if (rcfg && !last) {
        lcmRcfgStep(xIn, pred, stock, next, init, begin, begin + L, slot, addNoise, L);
        continue;
      }
      lcmStep(xIn, pred, x0, init, begin, begin + L, slot, last ? 'none' : addNoise ? 'noise' : 'plain', L);
      // Past the last of several slots the RCFG update leaves the batch with its latent.
      if (rcfg && n === 1) rcfgStep(stock, pred, next, init, begin, begin + L, slot);
    }
    if (rcfg) {
      // The updated, shifted noise becomes the stock (slot 0 restarts from the seed's noise): swap
      // buffers instead of copying. The last slot's update leaves the batch with its latent.
      if (n > 1) next.set(init.subarray(0, L), 0);
      this.#stock = next;
      this.#next = stock;
      this.#stockShifted = n > 1;
    }
    this.stageMs.math += performance.now() - tm;
    if (this.#filled < n - 1) {
      this.#filled++;
      return null;
    }
    return x0.subarray((n - 1) * L);
  }

  /**
   * `use_denoising_batch: false`: all steps on the same frame, one UNet call each, no lag. Between
   * steps `do_add_noise` uses fresh noise (upstream `randn_like`), drawn from a seeded stream.
   */
  async #sequentialStep(z: Float32Array, frame: Frame | undefined): Promise<Float32Array> {
    const n = this.#n;
    const L = this.latentSize;
    const { alpha, beta, cSkip, cOut, subTimesteps } = this.#tables;
    const mode = this.activeCfg;
    const g = this.#params.guidance_scale;
    const tList = this.#params.t_index_list;
    // x and x0 alternate between two reused buffers.
    let x = this.#seqX;
    for (let i = 0; i < L; i++) x[i] = (alpha[0] as number) * (z[i] as number) + (beta[0] as number) * (this.#init[i] as number);
    let x0 = x;
    for (let s = 0; s < n; s++) {
      const t = subTimesteps[s] as number;
      const ti = tList[s] as number;
      const two = mode === 'full' || mode === 'initialize';
      const sample = two ? this.#sample : x;
      if (two) {
        sample.set(x, 0);
        sample.set(x, L);
      }
      const tu = performance.now();
      const eps = await this.#unet(sample, two ? [t, t] : [t], two ? [ti, ti] : [ti], frame);
      this.stageMs.unet += performance.now() - tu;
      const tm = performance.now();
      const a = alpha[s] as number;
      const b = beta[s] as number;
      x0 = x === this.#seqX ? this.#x0.subarray(0, L) : this.#seqX;
      for (let i = 0; i < L; i++) {
        let e = two ? (eps[L + i] as number) : (eps[i] as number);
        if (two) e = (eps[i] as number) + g * (e - (eps[i] as number));
        else if (mode === 'self') {
          const unc = (this.#init[s * L + i] as number) * this.#params.delta;
          e = unc + g * (e - unc);
        }
        x0[i] = ((cOut[s] as number) * (x[i] as number - b * e)) / a + (cSkip[s] as number) * (x[i] as number);
      }
      if (s + 1 < n) {
        const an = alpha[s + 1] as number;
        const bn = beta[s + 1] as number;
        const fresh = this.#params.do_add_noise ? gaussianNoise(this.#freshNoise.nextUint32(), L) : null;
        // x takes the buffer x0 does not use.
        x = x0 === this.#seqX ? this.#x0.subarray(0, L) : this.#seqX;
        for (let i = 0; i < L; i++) x[i] = an * (x0[i] as number) + (fresh ? bn * (fresh[i] as number) : 0);
      }
      this.stageMs.math += performance.now() - tm;
    }
    return x0;
  }
}
