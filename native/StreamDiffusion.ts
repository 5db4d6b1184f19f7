/**
 * StreamDiffusion's per-frame algorithm over ONNX Runtime (reference/live-diffusion.md §1.3):
 * VAE encode → one batched UNet call (Stream Batch; +1 slot for RCFG 'initialize', ×2 for 'full')
 * → elementwise LCM boundary step → VAE decode. All per-slot scalars are precomputed; noise is
 * fixed per seed; prompt embeddings are cached per prompt and re-blended on weight changes.
 */
import type { Logger } from 'pino';
import { blendEmbeddings, blendNoise } from './Blend.ts';
import type { LatentTensor } from './Frame.ts';
import { LcmScheduler, type StepTables } from './LcmScheduler.ts';
import type { ModelSessions } from './ModelSessions.ts';
import type { ProcessorChain } from './processors/ProcessorChain.ts';
import { gaussianNoise, SeededRandom } from './SeededNoise.ts';
import type { CfgType, StreamParams } from './StreamParams.ts';

/** Milliseconds spent per stage on the last frame. */
export interface DiffusionStageMs {
  encode: number;
  unet: number;
  /** Elementwise scheduler math and buffer shifts. */
  math: number;
  decode: number;
}

const IDENTITY_CHAIN: ProcessorChain<LatentTensor> = { types: [], empty: true, apply: (x) => x, observeOutput: () => {}, reset: () => {} };

export class StreamDiffusion {
  readonly sessions: ModelSessions;
  readonly width: number;
  readonly height: number;
  readonly latentWidth: number;
  readonly latentHeight: number;
  /** Floats in one latent (C·h·w). */
  readonly latentSize: number;
  readonly stageMs: DiffusionStageMs = { encode: 0, unet: 0, math: 0, decode: 0 };
  latentPre: ProcessorChain<LatentTensor> = IDENTITY_CHAIN;
  latentPost: ProcessorChain<LatentTensor> = IDENTITY_CHAIN;

  readonly #scheduler = new LcmScheduler();
  readonly #logger: Logger;
  readonly #promptCache = new Map<string, Float32Array>();
  readonly #noiseCache = new Map<number, Float32Array>();
  #params!: StreamParams;
  #tables!: StepTables;
  #n = 0;
  #init: Float32Array = new Float32Array(0);
  #stock = new Float32Array(0);
  #buffer = new Float32Array(0);
  /** Frames pushed into the batch since the last flush; outputs start at n−1. */
  #filled = 0;
  #cond: Float32Array = new Float32Array(0);
  #uncond: Float32Array = new Float32Array(0);
  /** Embeddings laid out for the UNet batch of the current cfg mode. */
  #unetEmbeds = new Float32Array(0);
  #freshNoise = new SeededRandom(0);

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

  static async create(sessions: ModelSessions, params: StreamParams, logger: Logger): Promise<StreamDiffusion> {
    const sd = new StreamDiffusion(sessions, params, logger);
    await sd.apply(params);
    return sd;
  }

  /** Stream Batch output lag in frames: len(t_index_list) − 1 (0 without the denoising batch). */
  get lag(): number {
    return this.#params.use_denoising_batch ? this.#n - 1 : 0;
  }

  /** The cfg mode actually active: guidance_scale ≤ 1 disables every CFG path. */
  get activeCfg(): CfgType {
    return this.#params.guidance_scale > 1 ? this.#params.cfg_type : 'none';
  }

  /** Empties the Stream Batch: the next lag frames return null again. */
  flush(): void {
    this.#buffer.fill(0);
    this.#stock.fill(0);
    this.#filled = 0;
  }

  /**
   * Applies (hot) params: recomputes only what changed. Width/height/model are fixed for the life
   * of this object (they are reload keys).
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
        this.#stock = new Float32Array(n * L);
        this.#buffer = new Float32Array(Math.max(0, n - 1) * L);
        this.#filled = 0;
      }
    }
    if (changed('seed') || changed('seed_interpolation_method') || changed('normalize_seed_weights') || this.#init.length !== this.#n * L) {
      const seeds: [number, number][] = typeof next.seed === 'number' ? [[next.seed, 1]] : next.seed;
      const noises = seeds.map(([s]) => this.#noiseFor(s));
      this.#init = blendNoise(noises, seeds.map(([, w]) => w), { method: next.seed_interpolation_method, normalize: next.normalize_seed_weights }).subarray(0, this.#n * L);
      this.#stock.fill(0);
      this.#freshNoise = new SeededRandom((seeds[0]?.[0] ?? 0) ^ 0x5eed);
    }
    const needUncond = this.activeCfg === 'full' || this.activeCfg === 'initialize';
    const promptChanged = changed('prompt') || changed('prompt_interpolation_method') || changed('normalize_prompt_weights');
    if (promptChanged || this.#cond.length === 0) {
      const prompts: [string, number][] = typeof next.prompt === 'string' ? [[next.prompt, 1]] : next.prompt;
      await this.#encodePrompts([...prompts.map(([p]) => p), ...(needUncond ? [next.negative_prompt] : [])]);
      const embeds = prompts.map(([p]) => this.#promptCache.get(p) as Float32Array);
      this.#cond = blendEmbeddings(embeds, prompts.map(([, w]) => w), { method: next.prompt_interpolation_method, normalize: next.normalize_prompt_weights });
    }
    if (needUncond) {
      await this.#encodePrompts([next.negative_prompt]);
      this.#uncond = this.#promptCache.get(next.negative_prompt) as Float32Array;
    }
    this.#layoutEmbeds();
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
    this.#logger.debug(`StreamDiffusion.apply() | encoded prompts [count:${missing.length}]`);
  }

  #layoutEmbeds(): void {
    const n = this.#n;
    const E = this.#cond.length;
    const mode = this.activeCfg;
    const slots: Float32Array[] = [];
    if (mode === 'full') for (let i = 0; i < n; i++) slots.push(this.#uncond);
    if (mode === 'initialize') slots.push(this.#uncond);
    for (let i = 0; i < n; i++) slots.push(this.#cond);
    const batch = this.#params.use_denoising_batch ? slots.length : slots.length - (n - 1) * (mode === 'full' ? 2 : 1);
    const out = new Float32Array(batch * E);
    // Sequential mode runs one slot (+ its uncond) per call: [uncond?, cond].
    const layout = this.#params.use_denoising_batch ? slots : mode === 'none' || mode === 'self' ? [this.#cond] : [this.#uncond, this.#cond];
    layout.forEach((s, i) => out.set(s, i * E));
    this.#unetEmbeds = out;
  }

  /**
   * One frame: `image` [1,3,H,W] in [-1,1] → decoded image [1,3,H,W] (unclamped), or null while
   * the Stream Batch is still filling after a flush.
   */
  async step(image: Float32Array): Promise<Float32Array | null> {
    const p = this.#params;
    const info = this.sessions.info;
    const L = this.latentSize;
    const dimsOf = (b: number): [number, number, number, number] => [b, info.latentChannels, this.latentHeight, this.latentWidth];
    let t0 = performance.now();
    const raw = await this.sessions.encodeImage(image, this.width, this.height);
    const z0 = new Float32Array(L);
    for (let i = 0; i < L; i++) z0[i] = (raw[i] as number) * info.scalingFactor;
    const z = this.latentPre.apply({ data: z0, dims: dimsOf(1) }).data;
    let t1 = performance.now();
    this.stageMs.encode = t1 - t0;
    this.stageMs.unet = 0;
    this.stageMs.math = 0;

    const out = p.use_denoising_batch ? await this.#batchStep(z, dimsOf) : await this.#sequentialStep(z, dimsOf);
    if (!out) return null;

    t0 = performance.now();
    const post = this.latentPost.apply({ data: out, dims: dimsOf(1) }).data;
    const scaled = new Float32Array(L);
    for (let i = 0; i < L; i++) scaled[i] = (post[i] as number) / info.scalingFactor;
    const img = await this.sessions.decodeLatent(scaled, this.latentHeight, this.latentWidth);
    t1 = performance.now();
    this.stageMs.decode = t1 - t0;
    return img;
  }

  async #batchStep(z: Float32Array, dimsOf: (b: number) => [number, number, number, number]): Promise<Float32Array | null> {
    const n = this.#n;
    const L = this.latentSize;
    const { alpha, beta, cSkip, cOut, subTimesteps } = this.#tables;
    const init = this.#init;
    const stock = this.#stock;
    const mode = this.activeCfg;
    const rcfg = this.#params.cfg_type === 'self' || this.#params.cfg_type === 'initialize';
    let tm = performance.now();
    // Slot 0: the new frame noised to t0 (always, whatever do_add_noise says); slots 1.. the buffer.
    const xIn = new Float32Array(n * L);
    const a0 = alpha[0] as number;
    const b0 = beta[0] as number;
    for (let i = 0; i < L; i++) xIn[i] = a0 * (z[i] as number) + b0 * (init[i] as number);
    xIn.set(this.#buffer, L);
    if (n > 1) {
      // The residual noise travels with its latent.
      stock.copyWithin(L, 0, (n - 1) * L);
      stock.set(init.subarray(0, L), 0);
    }
    let sample = xIn;
    let ts = subTimesteps;
    if (mode === 'initialize') {
      sample = new Float32Array((n + 1) * L);
      sample.set(xIn.subarray(0, L), 0);
      sample.set(xIn, L);
      ts = [subTimesteps[0] as number, ...subTimesteps];
    } else if (mode === 'full') {
      sample = new Float32Array(2 * n * L);
      sample.set(xIn, 0);
      sample.set(xIn, n * L);
      ts = [...subTimesteps, ...subTimesteps];
    }
    this.stageMs.math += performance.now() - tm;
    const tu = performance.now();
    const eps = await this.sessions.predictNoise(sample, dimsOf(ts.length), ts, this.#unetEmbeds);
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
    let pred = epsText;
    if (mode !== 'none') {
      pred = new Float32Array(n * L);
      for (let i = 0; i < n * L; i++) {
        const unc = mode === 'full' ? (eps[i] as number) : (stock[i] as number) * delta;
        pred[i] = unc + g * ((epsText[i] as number) - unc);
      }
    }
    const x0 = new Float32Array(n * L);
    for (let s = 0; s < n; s++) {
      const a = alpha[s] as number;
      const b = beta[s] as number;
      const co = cOut[s] as number;
      const cs = cSkip[s] as number;
      for (let i = s * L; i < (s + 1) * L; i++) {
        const x = xIn[i] as number;
        x0[i] = (co * (x - b * (pred[i] as number))) / a + cs * x;
      }
    }
    if (rcfg) {
      // RCFG residual-noise update: the stock noise follows each latent to its next timestep.
      const next = new Float32Array(n * L);
      for (let s = 0; s < n; s++) {
        const a = alpha[s] as number;
        const b = beta[s] as number;
        const co = cOut[s] as number;
        const cs = cSkip[s] as number;
        const an = s + 1 < n ? (alpha[s + 1] as number) : 1;
        const bn = s + 1 < n ? (beta[s + 1] as number) : 1;
        const rolled = ((s + 1) % n) * L;
        for (let i = 0; i < L; i++) {
          const k = s * L + i;
          const sn = b * (stock[k] as number);
          const dx = (co * (sn - b * (pred[k] as number))) / a + cs * sn;
          next[k] = (init[rolled + i] as number) + (an * dx) / bn;
        }
      }
      stock.set(next);
    }
    // Advance the batch: slot s becomes slot s+1 at the next timestep.
    const addNoise = this.#params.do_add_noise;
    for (let s = 0; s + 1 < n; s++) {
      const an = alpha[s + 1] as number;
      const bn = beta[s + 1] as number;
      for (let i = 0; i < L; i++) {
        const k = s * L + i;
        this.#buffer[k] = an * (x0[k] as number) + (addNoise ? bn * (init[(s + 1) * L + i] as number) : 0);
      }
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
  async #sequentialStep(z: Float32Array, dimsOf: (b: number) => [number, number, number, number]): Promise<Float32Array> {
    const n = this.#n;
    const L = this.latentSize;
    const { alpha, beta, cSkip, cOut, subTimesteps } = this.#tables;
    const mode = this.activeCfg;
    const g = this.#params.guidance_scale;
    let x = new Float32Array(L);
    for (let i = 0; i < L; i++) x[i] = (alpha[0] as number) * (z[i] as number) + (beta[0] as number) * (this.#init[i] as number);
    let x0 = x;
    for (let s = 0; s < n; s++) {
      const t = subTimesteps[s] as number;
      const two = mode === 'full' || mode === 'initialize';
      const sample = two ? new Float32Array(2 * L) : x;
      if (two) {
        sample.set(x, 0);
        sample.set(x, L);
      }
      const tu = performance.now();
      const eps = await this.sessions.predictNoise(sample, dimsOf(two ? 2 : 1), two ? [t, t] : [t], this.#unetEmbeds);
      this.stageMs.unet += performance.now() - tu;
      const tm = performance.now();
      const a = alpha[s] as number;
      const b = beta[s] as number;
      x0 = new Float32Array(L);
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
        x = new Float32Array(L);
        for (let i = 0; i < L; i++) x[i] = an * (x0[i] as number) + (fresh ? bn * (fresh[i] as number) : 0);
      }
      this.stageMs.math += performance.now() - tm;
    }
    return x0;
  }
}
