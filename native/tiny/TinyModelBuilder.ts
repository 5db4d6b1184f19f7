/**
 * Writes small random-weight (seeded) Stable Diffusion ONNX models with the real I/O contract, in
 * the diffusers/optimum layout, for tests and the demo default. They are NOT generative models:
 * the VAE is a fixed 8×8 average-pool / linear-resize pair (so the picture survives the round
 * trip), the UNet predicts ≈ √(1−ᾱ_t)·sample plus a prompt-conditioned residual through real
 * cross-attention, plus two large-scale paths so prompts and seeds change the picture in ways a
 * viewer sees through H.264 and in thumbnails: a global brightness from the prompt's words (a
 * "tone" channel of the text encoder) and low-frequency blobs from the seed's noise. Every folder's
 * config says `"_demo": true`.
 *
 * Layout (reference/live-diffusion.md §5.1):
 *   <modelsDir>/<model_id>/model_index.json, scheduler/scheduler_config.json,
 *   tokenizer/{vocab.json,merges.txt,special_tokens_map.json,tokenizer_config.json},
 *   text_encoder/model.onnx, unet/model.onnx, vae_encoder/model.onnx, vae_decoder/model.onnx
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { LcmScheduler } from '../LcmScheduler.ts';
import { runnableControlNetsFor, supportsIpAdapter } from '../params/index.ts';
import { writeSafetensors } from '../LoraMerge.ts';
import { SeededRandom } from '../SeededNoise.ts';
import { OnnxGraph } from '../OnnxGraph.ts';
import { buildTinyVocab } from './TinyVocab.ts';

export interface TinyModelOptions {
  /** Text embedding width D (cross_attention_dim). Default 32 (real: 768 sd15, 1024 sd2.1). */
  embedDim?: number;
  /** Latent channels C. Default 4. */
  latentChannels?: number;
  /** VAE spatial scale factor f (pool/resize factor). Default 8, as the real VAEs. */
  vaeScaleFactor?: number;
  /** UNet hidden channels. Default 32. */
  unetChannels?: number;
  /** Weight seed. Default 1234. */
  seed?: number;
  /** `timestep` input dtype: float32 (diffusers script, StreamDiffusion TRT) or int64. Default float32. */
  timestepType?: 'float32' | 'int64';
  /** Text encoder `input_ids` dtype: int32 (diffusers script) or int64 (optimum). Default int32. */
  inputIdsType?: 'int32' | 'int64';
  /** Text sequence length (max_position_embeddings). Default 77. */
  maxLength?: number;
  /**
   * ControlNet ids to write under `<modelsDir>/controlnet/<id>/model.onnx`; when non-empty the
   * UNet is exported with ControlNet residual inputs. Default none (a plain UNet).
   */
  controlNets?: string[];
  /** Write `safety_checker/model.onnx` (flags near-white frames: a demo, not a classifier). Default false. */
  safetyChecker?: boolean;
  /** Write `image_encoder/model.onnx` (IP-Adapter image tokens). Default false. */
  imageEncoder?: boolean;
}

/** Real Daydream model ids; the CLI writes a demo model under each unless told otherwise. */
export const DEMO_MODEL_IDS = ['stabilityai/sd-turbo', 'stabilityai/sdxl-turbo', 'Lykon/dreamshaper-8', 'prompthero/openjourney-v4'] as const;

/**
 * Version of what a demo model folder holds (model_index.json `_demo_version`). Raised whenever the
 * builder writes different parts, so a start-up rewrites demo folders an older build left
 * (2: every runnable ControlNet of the family with a residual-input UNet, and the IP-Adapter image
 * encoder on families that take one; 3: the prompt's tone → brightness and the seed's low-frequency
 * paths).
 */
export const DEMO_MODEL_VERSION = 3;

/**
 * What a demo model of `modelId` needs so every ControlNet and IP-Adapter the API accepts for it runs
 * out of the box: its family's runnable ControlNets (and a UNet with residual inputs), and an image
 * encoder where the family takes an IP-Adapter.
 */
export function demoModelOptions(modelId: string): TinyModelOptions {
  return { controlNets: runnableControlNetsFor(modelId), imageEncoder: supportsIpAdapter(modelId) };
}

/**
 * Whether `<modelsDir>/<modelId>` is a demo model written by this builder's current version with
 * the parts `demoModelOptions` asks for; false for real exports and for older demo folders.
 */
export function isCurrentDemoModel(modelsDir: string, modelId: string): boolean {
  try {
    const index = JSON.parse(readFileSync(join(modelsDir, modelId, 'model_index.json'), 'utf8')) as { _demo?: unknown; _demo_version?: unknown };
    if (index._demo !== true || index._demo_version !== DEMO_MODEL_VERSION) return false;
  } catch {
    return false;
  }
  const o = demoModelOptions(modelId);
  if (o.imageEncoder && !existsSync(join(modelsDir, modelId, 'image_encoder', 'model.onnx'))) return false;
  return (o.controlNets ?? []).every((id) => existsSync(join(modelsDir, 'controlnet', id, 'model.onnx')));
}

/** A real (non-demo) export under `dir` (a model.onnx whose config is not `_demo`): never overwritten by a demo. */
export function isRealExport(dir: string): boolean {
  if (!existsSync(join(dir, 'model.onnx'))) return false;
  try {
    return (JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { _demo?: unknown })._demo !== true;
  } catch {
    return true;
  }
}

/** Writes one tiny model under `<modelsDir>/<modelId>/`; returns that directory. */
export function buildTinyModel(modelsDir: string, modelId: string, options: TinyModelOptions = {}): string {
  const o = {
    embedDim: options.embedDim ?? 32,
    latentChannels: options.latentChannels ?? 4,
    vaeScaleFactor: options.vaeScaleFactor ?? 8,
    unetChannels: options.unetChannels ?? 32,
    seed: options.seed ?? 1234,
    timestepType: options.timestepType ?? 'float32',
    inputIdsType: options.inputIdsType ?? 'int32',
    maxLength: options.maxLength ?? 77,
    controlNets: options.controlNets ?? [],
    safetyChecker: options.safetyChecker ?? false,
    imageEncoder: options.imageEncoder ?? false,
  };
  const dir = join(modelsDir, modelId);
  const randn = gaussian(new SeededRandom(o.seed));
  const write = (sub: string, file: string, data: Uint8Array | string) => {
    mkdirSync(join(dir, sub), { recursive: true });
    writeFileSync(join(dir, sub, file), data);
  };
  const demoNote = 'DEMO model: random weights with the real I/O contract; not a generative model';

  // --- tokenizer ---
  const { vocab, merges } = buildTinyVocab();
  const vocabSize = Math.max(...Object.values(vocab)) + 1;
  write('tokenizer', 'vocab.json', JSON.stringify(vocab));
  write('tokenizer', 'merges.txt', `#version: 0.2\n${merges.join('\n')}\n`);
  write('tokenizer', 'special_tokens_map.json', JSON.stringify({ bos_token: '<|startoftext|>', eos_token: '<|endoftext|>', unk_token: '<|endoftext|>', pad_token: '<|endoftext|>' }));
  write('tokenizer', 'tokenizer_config.json', JSON.stringify({ model_max_length: o.maxLength, do_lower_case: true, tokenizer_class: 'CLIPTokenizer', _demo: true }));

  write('text_encoder', 'model.onnx', textEncoder(o, vocabSize, [vocab['<|startoftext|>'] as number, vocab['<|endoftext|>'] as number], randn));
  write('unet', 'model.onnx', unet(o, randn));
  write('vae_encoder', 'model.onnx', vaeEncoder(o, randn));
  write('vae_decoder', 'model.onnx', vaeDecoder(o, randn));
  for (const [i, id] of o.controlNets.entries()) {
    const cnDir = join(modelsDir, 'controlnet', id);
    if (isRealExport(cnDir)) continue;
    mkdirSync(cnDir, { recursive: true });
    const cnRng = new SeededRandom(o.seed + 7919 * (i + 1));
    writeFileSync(join(cnDir, 'model.onnx'), controlNet(o, gaussian(cnRng)));
    writeFileSync(join(cnDir, 'config.json'), JSON.stringify({ _demo: true, _note: demoNote, block_out_channels: [o.unetChannels], layers_per_block: 1 }, null, 2));
  }
  if (o.safetyChecker) {
    write('safety_checker', 'model.onnx', safetyChecker());
    write('safety_checker', 'config.json', JSON.stringify({ _demo: true, note: 'DEMO: flags frames whose mean brightness is above ~0.9; not a content classifier' }, null, 2));
  }
  if (o.imageEncoder) write('image_encoder', 'model.onnx', imageEncoder(o, randn));

  const vaeConfig = { _demo: true, latent_channels: o.latentChannels, scaling_factor: 1.0, note: demoNote };
  write('vae_encoder', 'config.json', JSON.stringify(vaeConfig, null, 2));
  write('vae_decoder', 'config.json', JSON.stringify(vaeConfig, null, 2));
  write('text_encoder', 'config.json', JSON.stringify({ _demo: true, hidden_size: o.embedDim, max_position_embeddings: o.maxLength, vocab_size: vocabSize }, null, 2));
  // block_out_channels/layers_per_block give the ControlNet residual shapes (ModelSessions).
  write('unet', 'config.json', JSON.stringify({ _demo: true, in_channels: o.latentChannels, out_channels: o.latentChannels, cross_attention_dim: o.embedDim, block_out_channels: [o.unetChannels], layers_per_block: 1 }, null, 2));
  write(
    'scheduler',
    'scheduler_config.json',
    JSON.stringify({ _class_name: 'LCMScheduler', beta_start: 0.00085, beta_end: 0.012, beta_schedule: 'scaled_linear', num_train_timesteps: 1000, original_inference_steps: 50, timestep_scaling: 10 }, null, 2),
  );
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'model_index.json'),
    JSON.stringify(
      {
        _class_name: 'OnnxStableDiffusionPipeline',
        _demo: true,
        _demo_version: DEMO_MODEL_VERSION,
        _note: demoNote,
        _model_id: modelId,
        text_encoder: ['onnx', 'tiny'],
        tokenizer: ['transformers', 'CLIPTokenizer'],
        unet: ['onnx', 'tiny'],
        vae_encoder: ['onnx', 'tiny'],
        vae_decoder: ['onnx', 'tiny'],
        scheduler: ['diffusers', 'LCMScheduler'],
      },
      null,
      2,
    ),
  );
  return dir;
}

/**
 * Writes a tiny LoRA for a tiny model built with the same embedDim/unetChannels/latentChannels to
 * `<modelsDir>/lora/<name>.safetensors`, patching the UNet's `w_q`, `w_k` (MatMul) and `w_in`
 * (Conv) initializers at rank `rank`. Returns the file.
 */
export function buildTinyLora(modelsDir: string, name: string, options: { rank?: number; seed?: number; embedDim?: number; unetChannels?: number; latentChannels?: number } = {}): string {
  const r = options.rank ?? 2;
  const D = options.embedDim ?? 32;
  const H = options.unetChannels ?? 32;
  const C = options.latentChannels ?? 4;
  const randn = gaussian(new SeededRandom(options.seed ?? 99));
  // name → [out, in·kh·kw] of the update (MatMul [in,out] initializers take its transpose).
  const targets: Record<string, [number, number]> = { w_q: [H, H], w_k: [H, D], w_in: [H, C * 9] };
  const tensors: Record<string, { shape: number[]; data: Float32Array }> = {};
  for (const [t, [out, inK]] of Object.entries(targets)) {
    tensors[`${t}.lora_down.weight`] = { shape: [r, inK], data: randn(r * inK, 1 / Math.sqrt(inK)) };
    tensors[`${t}.lora_up.weight`] = { shape: [out, r], data: randn(out * r, 0.5) };
    tensors[`${t}.alpha`] = { shape: [], data: Float32Array.of(r) };
  }
  const file = join(modelsDir, 'lora', `${name}.safetensors`);
  mkdirSync(join(file, '..'), { recursive: true });
  writeFileSync(file, writeSafetensors(tensors));
  return file;
}

type Opts = Required<TinyModelOptions>;
type Randn = (n: number, scale: number) => Float32Array;

/** Box–Muller over a seeded stream. */
function gaussian(rng: SeededRandom): Randn {
  return (n: number, scale: number) => {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i += 2) {
      const r = Math.sqrt(-2 * Math.log(1 - rng.next()));
      const th = 2 * Math.PI * rng.next();
      out[i] = r * Math.cos(th) * scale;
      if (i + 1 < n) out[i + 1] = r * Math.sin(th) * scale;
    }
    return out;
  };
}

/** Sinusoidal timestep embedding → linear → SiLU, shaped [B,H,1,1]. */
function timestepEmbedding(g: OnnxGraph, tF: string, H: number, randn: Randn, prefix: string): string {
  const half = H / 2;
  const freqs = Float32Array.from({ length: half }, (_, i) => Math.exp((-Math.log(10000) * i) / half));
  const arg = g.op1('Mul', [g.op1('Unsqueeze', [tF, g.i64(`${prefix}ax1`, [1], [1])]), g.f32(`${prefix}freqs`, [1, half], freqs)]);
  const temb0 = g.op1('MatMul', [g.op1('Concat', [g.op1('Sin', [arg]), g.op1('Cos', [arg])], { axis: 1 }), g.f32(`${prefix}w_temb`, [H, H], randn(H * H, 1 / Math.sqrt(H)))]);
  return g.op1('Reshape', [silu(g, temb0), g.i64(`${prefix}temb_shape`, [4], [-1, H, 1, 1])]);
}

/**
 * A tiny ControlNet with the diffusers ControlNetModel I/O names: the control image is pooled to
 * the latent grid and embedded (the "hint"), added to the sample's features with the timestep and
 * mean text embedding, and projected by "zero convolutions" (small random here, trained in real
 * ones) into two down residuals and a mid residual, each times `conditioning_scale`.
 */
function controlNet(o: Opts, randn: Randn): Uint8Array {
  const C = o.latentChannels;
  const H = o.unetChannels;
  const D = o.embedDim;
  const f = o.vaeScaleFactor;
  const g = new OnnxGraph('controlnet');
  const sample = g.input('sample', 'float32', ['batch', C, 'height', 'width']);
  const timestep = g.input('timestep', o.timestepType, ['batch']);
  const enc = g.input('encoder_hidden_states', 'float32', ['batch', 'sequence', D]);
  const cond = g.input('controlnet_cond', 'float32', ['batch', 3, 'image_height', 'image_width']);
  const scale = g.input('conditioning_scale', 'float32', []);
  const tF = o.timestepType === 'float32' ? timestep : g.op1('Cast', [timestep], { to: 1 });
  const temb = timestepEmbedding(g, tF, H, randn, 'cn_');
  const hint = g.op1('Conv', [g.op1('AveragePool', [cond], { kernel_shape: [f, f], strides: [f, f] }), g.f32('w_hint', [H, 3, 1, 1], randn(H * 3, 1))]);
  const ctx = g.op1('Reshape', [g.op1('MatMul', [g.op1('ReduceMean', [enc], { axes: [1], keepdims: 0 }), g.f32('w_ctx', [D, H], randn(D * H, 0.1 / Math.sqrt(D)))]), g.i64('ctx_shape', [4], [-1, H, 1, 1])]);
  const h0 = g.op1('Conv', [sample, g.f32('w_in', [H, C, 3, 3], randn(H * C * 9, 1 / Math.sqrt(C * 9)))], { pads: [1, 1, 1, 1], kernel_shape: [3, 3] });
  const h = silu(g, g.op1('Add', [g.op1('Add', [h0, hint]), g.op1('Add', [temb, ctx])]));
  const h2 = silu(g, g.op1('Conv', [h, g.f32('w_mid', [H, H, 3, 3], randn(H * H * 9, 1 / Math.sqrt(H * 9)))], { pads: [1, 1, 1, 1], kernel_shape: [3, 3] }));
  const zero = (name: string, x: string, out: string) =>
    g.op1('Mul', [g.op1('Conv', [x, g.f32(name, [H, H, 1, 1], randn(H * H, 0.3 / Math.sqrt(H)))]), scale], {}, out);
  zero('zero_conv_0', h, 'down_block_res_sample_0');
  zero('zero_conv_1', h2, 'down_block_res_sample_1');
  zero('zero_conv_mid', h2, 'mid_block_res_sample');
  for (const n of ['down_block_res_sample_0', 'down_block_res_sample_1', 'mid_block_res_sample']) g.output(n, 'float32', ['batch', H, 'height', 'width']);
  return g.encode({ demo: 'true' });
}

/**
 * Demo safety checker with the diffusers ONNX input name `clip_input` [B,3,224,224] (CLIP-normalised
 * pixels) and one output `scores` [B] in [0,1]: a steep sigmoid of the mean brightness around 0.9.
 * It flags near-white frames, nothing else; it stands in for the real CLIP concept classifier.
 */
function safetyChecker(): Uint8Array {
  const g = new OnnxGraph('safety_checker');
  const x = g.input('clip_input', 'float32', ['batch', 3, 224, 224]);
  // Undo CLIP normalisation (mean/std per channel) back to [0,1], then the mean over C,H,W.
  const mean = g.f32('clip_mean', [1, 3, 1, 1], [0.48145466, 0.4578275, 0.40821073]);
  const std = g.f32('clip_std', [1, 3, 1, 1], [0.26862954, 0.26130258, 0.27577711]);
  const px = g.op1('Add', [g.op1('Mul', [x, std]), mean]);
  const m = g.op1('ReduceMean', [px], { axes: [1, 2, 3], keepdims: 0 });
  g.op1('Sigmoid', [g.op1('Mul', [g.op1('Sub', [m, g.f32('knee', [], [0.9])]), g.f32('steep', [], [60])])], {}, 'scores');
  g.output('scores', 'float32', ['batch']);
  return g.encode({ demo: 'true' });
}

/**
 * Demo IP-Adapter image encoder: `pixel_values` [B,3,224,224] (CLIP-normalised) → `image_embeds`
 * [B,4,D], i.e. CLIP vision + the IP-Adapter projection collapsed into one small graph: 4×4
 * pooled colour patches through a random linear map to 4 tokens of width D.
 */
function imageEncoder(o: Opts, randn: Randn): Uint8Array {
  const D = o.embedDim;
  const K = 4;
  const g = new OnnxGraph('image_encoder');
  const x = g.input('pixel_values', 'float32', ['batch', 3, 224, 224]);
  const pooled = g.op1('AveragePool', [x], { kernel_shape: [56, 56], strides: [56, 56] });
  const flat = g.op1('Flatten', [pooled], { axis: 1 });
  const tokens = g.op1('MatMul', [flat, g.f32('w_proj', [48, K * D], randn(48 * K * D, 1 / Math.sqrt(48)))]);
  g.op1('Reshape', [tokens, g.i64('tok_shape', [3], [-1, K, D])], {}, 'image_embeds');
  g.output('image_embeds', 'float32', ['batch', K, D]);
  return g.encode({ demo: 'true' });
}

/**
 * Per-token "tone" (embedding channel 0 of the text encoder's output): a random N(0,1) number per
 * vocabulary entry, 0 for the start/end/padding tokens, so the sum over a prompt's tokens depends on
 * its words only (padding does not dilute it). The UNet turns that sum into a global brightness.
 */
const TONE_CHANNEL = 0;

function textEncoder(o: Opts, vocabSize: number, special: number[], randn: Randn): Uint8Array {
  const D = o.embedDim;
  const g = new OnnxGraph('text_encoder');
  const ids = g.input('input_ids', o.inputIdsType, ['batch', 'sequence']);
  const tok = g.op1('Gather', [g.f32('token_embedding', [vocabSize, D], randn(vocabSize * D, 1)), ids], { axis: 0 });
  // Position embeddings sliced to the actual sequence length (dynamic axis).
  const seqLen = g.op1('Slice', [g.op1('Shape', [ids]), g.i64('one', [1], [1]), g.i64('two', [1], [2])]);
  const pos = g.op1('Slice', [g.f32('position_embedding', [o.maxLength, D], randn(o.maxLength * D, 0.5)), g.i64('zero', [1], [0]), seqLen, g.i64('axis0', [1], [0])]);
  const h = g.op1('Add', [tok, pos]);
  const ones = g.f32('ln_scale', [D], new Float32Array(D).fill(1));
  const zeros = g.f32('ln_bias', [D], new Float32Array(D));
  const ln = g.op1('LayerNormalization', [h, ones, zeros], { axis: -1, epsilon: 1e-5 });
  // A cheap stand-in for self-attention: every token sees the sequence mean.
  const ctx = g.op1('MatMul', [g.op1('ReduceMean', [ln], { axes: [1], keepdims: 1 }), g.f32('w_ctx', [D, D], randn(D * D, 1 / Math.sqrt(D)))]);
  const mlp = g.op1('Tanh', [g.op1('MatMul', [ln, g.f32('w_mlp', [D, D], randn(D * D, 1 / Math.sqrt(D)))])]);
  const h2 = g.op1('Add', [h, g.op1('Add', [mlp, ctx])]);
  // The last norm leaves the tone channel at exactly 0 (scale and bias 0 there); the token's tone
  // is written into it, one-hot over D.
  const oneHot = (c: number) => Float32Array.from({ length: D }, (_, i) => (i === c ? 1 : 0));
  const lastScale = g.f32('ln_out_scale', [D], Float32Array.from({ length: D }, (_, i) => (i === TONE_CHANNEL ? 0 : 1)));
  const normed = g.op1('LayerNormalization', [h2, lastScale, zeros], { axis: -1, epsilon: 1e-5 });
  const toneTable = randn(vocabSize, 1);
  for (const id of special) toneTable[id] = 0;
  const tone = g.op1('Gather', [g.f32('token_tone', [vocabSize, 1], toneTable), ids], { axis: 0 });
  const last = g.op1('Add', [normed, g.op1('Mul', [tone, g.f32('tone_onehot', [D], oneHot(TONE_CHANNEL))])], {}, 'last_hidden_state');
  g.op1('ReduceMean', [last], { axes: [1], keepdims: 0 }, 'pooler_output');
  g.output('last_hidden_state', 'float32', ['batch', 'sequence', D]);
  g.output('pooler_output', 'float32', ['batch', D]);
  return g.encode({ demo: 'true' });
}

/** Brightness the prompt's tone moves the output by, at most, in [−1, 1] pixel units (0.3 ≈ 38 luma levels). */
const TONE_AMPLITUDE = 0.3;
/** Slope of the tone → brightness tanh: a 3-word prompt's sum (std √3) lands mostly in its linear part. */
const TONE_GAIN = 0.5;

/** Latent pixels per side the seed's large-scale structure is pooled over (8 = 64 image px; the smallest frame, 64 px, is one block). */
const SEED_POOL = 8;
/** Gain on that pooled field: pooled unit noise has std 1/SEED_POOL, so ≈ 0.19 in [−1, 1] units (≈ 24 luma levels) at high noise. */
const SEED_GAIN = 1.5;

function unet(o: Opts, randn: Randn): Uint8Array {
  const C = o.latentChannels;
  const H = o.unetChannels;
  const D = o.embedDim;
  const g = new OnnxGraph('unet');
  const sample = g.input('sample', 'float32', ['batch', C, 'height', 'width']);
  const timestep = g.input('timestep', o.timestepType, ['batch']);
  const enc = g.input('encoder_hidden_states', 'float32', ['batch', 'sequence', D]);
  const cn = o.controlNets.length > 0;
  const res = cn
    ? ['down_block_additional_residual_0', 'down_block_additional_residual_1', 'mid_block_additional_residual'].map((n) => g.input(n, 'float32', ['batch', H, 'height', 'width']))
    : [];
  const tF = o.timestepType === 'float32' ? timestep : g.op1('Cast', [timestep], { to: 1 });
  // Sinusoidal timestep embedding → linear → SiLU → per-channel bias.
  const temb = timestepEmbedding(g, tF, H, randn, '');
  // √(1−ᾱ_t) lookup, so the prediction scales like the noise it stands for.
  const sched = new LcmScheduler();
  const betaTable = Float32Array.from(sched.alphasCumprod, (a) => Math.sqrt(1 - a));
  const tIdx = g.op1('Cast', [g.op1('Clip', [g.op1('Round', [tF]), g.f32('tmin', [], [0]), g.f32('tmax', [], [999])])], { to: 7 });
  const betaT = g.op1('Reshape', [g.op1('Gather', [g.f32('beta_table', [1000], betaTable), tIdx], { axis: 0 }), g.i64('b_shape', [4], [-1, 1, 1, 1])]);

  const h0 = g.op1('Conv', [sample, g.f32('w_in', [H, C, 3, 3], randn(H * C * 9, 1 / Math.sqrt(C * 9))), g.f32('b_in', [H], randn(H, 0.1))], { pads: [1, 1, 1, 1], kernel_shape: [3, 3] });
  // ControlNet residuals join where diffusers adds them: after conv_in, after the down block, at the mid block.
  const h1 = cn ? g.op1('Add', [silu(g, g.op1('Add', [g.op1('Add', [h0, res[0] as string]), temb])), res[1] as string]) : silu(g, g.op1('Add', [h0, temb]));
  // Cross-attention: queries from the latent pixels, keys/values from the text embeddings.
  const hShape = g.op1('Shape', [h1]);
  const q0 = g.op1('Transpose', [g.op1('Reshape', [h1, g.i64('flat', [3], [0, 0, -1])])], { perm: [0, 2, 1] });
  const q = g.op1('MatMul', [q0, g.f32('w_q', [H, H], randn(H * H, 1 / Math.sqrt(H)))]);
  const k = g.op1('MatMul', [enc, g.f32('w_k', [D, H], randn(D * H, 1 / Math.sqrt(D)))]);
  const v = g.op1('MatMul', [enc, g.f32('w_v', [D, H], randn(D * H, 1 / Math.sqrt(D)))]);
  const scores = g.op1('Mul', [g.op1('MatMul', [q, g.op1('Transpose', [k], { perm: [0, 2, 1] })]), g.f32('attn_scale', [], [1 / Math.sqrt(H)])]);
  const attn = g.op1('MatMul', [g.op1('MatMul', [g.op1('Softmax', [scores], { axis: -1 }), v]), g.f32('w_o', [H, H], randn(H * H, 1 / Math.sqrt(H)))]);
  const h2a = g.op1('Add', [h1, g.op1('Reshape', [g.op1('Transpose', [attn], { perm: [0, 2, 1] }), hShape])]);
  const h2 = cn ? g.op1('Add', [h2a, res[2] as string]) : h2a;
  const r = g.op1('Conv', [h2, g.f32('w_out', [C, H, 3, 3], randn(C * H * 9, 0.05 / Math.sqrt(H * 9))), g.f32('b_out', [C], new Float32Array(C))], { pads: [1, 1, 1, 1], kernel_shape: [3, 3] });
  // Global tone: the prompt's summed token tone (text channel TONE_CHANNEL) → a brightness
  // b = TONE_AMPLITUDE·tanh(TONE_GAIN·Σ tone), the same over the whole frame and on every latent
  // channel (the decoder reads channels 0–2 as RGB). Predicted as noise −(α_t/β_t)·b, so the LCM
  // step's x0 = c_out·(x − β_t·ε)/α_t + … carries +c_out·b whatever the timestep. Why: the random
  // cross-attention path only moves fine, noise-like detail, which a viewer's H.264 and any
  // thumbnail smooth away; a real model's prompt changes the whole picture, and this path gives the
  // demo one large-scale, smooth (and, along a linear prompt blend, monotonic) answer to the prompt.
  const ratioTable = Float32Array.from(sched.alphasCumprod, (a) => Math.sqrt(a) / Math.sqrt(Math.max(1 - a, 1e-12)));
  const ratioT = g.op1('Reshape', [g.op1('Gather', [g.f32('ratio_table', [1000], ratioTable), tIdx], { axis: 0 }), g.i64('r_shape', [4], [-1, 1, 1, 1])]);
  const toneSum = g.op1('ReduceSum', [g.op1('Gather', [enc, g.i64('tone_idx', [], [TONE_CHANNEL])], { axis: 2 }), g.i64('seq_axis', [1], [1])], { keepdims: 0 });
  const bright = g.op1('Mul', [g.op1('Tanh', [g.op1('Mul', [toneSum, g.f32('tone_gain', [], [TONE_GAIN])])]), g.f32('tone_amp', [], [-TONE_AMPLITUDE])]);
  const toneEps = g.op1('Mul', [g.op1('Reshape', [bright, g.i64('t_shape', [4], [-1, 1, 1, 1])]), ratioT]);
  // Large-scale structure from the noise: the sample's low frequencies (AveragePool over
  // SEED_POOL×SEED_POOL latent pixels, resized back) predicted as noise −α_t·SEED_GAIN·lf, so x0 gains
  // c_out·β_t·SEED_GAIN·lf(α_t·z + β_t·n): at high noise mostly the seed's own blobs (a different seed
  // lays the picture out differently, as with a real model), fading out at low noise. Without it a seed
  // only moved per-latent-pixel noise that a viewer's encoder and thumbnails average away.
  const lf = g.op1('Resize', [g.op1('AveragePool', [sample], { kernel_shape: [SEED_POOL, SEED_POOL], strides: [SEED_POOL, SEED_POOL], ceil_mode: 1 }), '', '', g.op1('Shape', [sample])], { mode: 'linear' });
  const alphaTable = Float32Array.from(sched.alphasCumprod, (a) => Math.sqrt(a));
  const alphaT = g.op1('Reshape', [g.op1('Gather', [g.f32('alpha_table', [1000], alphaTable), tIdx], { axis: 0 }), g.i64('a_shape', [4], [-1, 1, 1, 1])]);
  const seedEps = g.op1('Mul', [g.op1('Mul', [lf, alphaT]), g.f32('seed_gain', [], [-SEED_GAIN])]);
  g.op1('Add', [g.op1('Add', [g.op1('Add', [g.op1('Mul', [sample, betaT]), r]), toneEps]), seedEps], {}, 'out_sample');
  g.output('out_sample', 'float32', ['batch', C, 'height', 'width']);
  return g.encode({ demo: 'true' });
}

/** RGB → latent mixing: channels 0–2 carry the colour, the rest luma; decoder uses the left inverse. */
function mixMatrix(C: number): number[][] {
  return Array.from({ length: C }, (_, c) => (c < 3 ? [0, 1, 2].map((j) => (j === c ? 1 : 0)) : [0.299, 0.587, 0.114]));
}

function vaeEncoder(o: Opts, randn: Randn): Uint8Array {
  const C = o.latentChannels;
  const f = o.vaeScaleFactor;
  const g = new OnnxGraph('vae_encoder');
  const x = g.input('sample', 'float32', ['batch', 3, 'height', 'width']);
  const pooled = g.op1('AveragePool', [x], { kernel_shape: [f, f], strides: [f, f] });
  const mix = mixMatrix(C).flat();
  const noise = randn(C * 3, 0.02);
  const z = g.op1('Conv', [pooled, g.f32('w_mix', [C, 3, 1, 1], mix.map((m, i) => m + (noise[i] as number)))]);
  const ident = nearIdentity(C, randn);
  g.op1('Conv', [z, g.f32('w_refine', [C, C, 3, 3], ident)], { pads: [1, 1, 1, 1], kernel_shape: [3, 3] }, 'latent_sample');
  g.output('latent_sample', 'float32', ['batch', C, 'latent_height', 'latent_width']);
  return g.encode({ demo: 'true' });
}

function vaeDecoder(o: Opts, randn: Randn): Uint8Array {
  const C = o.latentChannels;
  const f = o.vaeScaleFactor;
  const g = new OnnxGraph('vae_decoder');
  const z = g.input('latent_sample', 'float32', ['batch', C, 'latent_height', 'latent_width']);
  const refined = g.op1('Conv', [z, g.f32('w_refine', [C, C, 3, 3], nearIdentity(C, randn))], { pads: [1, 1, 1, 1], kernel_shape: [3, 3] });
  // Left inverse of the encoder mix: take the colour channels.
  const unmix = Array.from({ length: 3 * C }, (_, i) => (Math.floor(i / C) === i % C ? 1 : 0));
  const noise = randn(3 * C, 0.02);
  const rgb = g.op1('Conv', [refined, g.f32('w_unmix', [3, C, 1, 1], unmix.map((m, i) => m + (noise[i] as number)))]);
  g.op1('Resize', [rgb, '', g.f32('scales', [4], [1, 1, f, f])], { mode: 'linear' }, 'sample');
  g.output('sample', 'float32', ['batch', 3, 'height', 'width']);
  return g.encode({ demo: 'true' });
}

/** A 3×3 conv kernel close to identity (centre tap 1) with small random taps. */
function nearIdentity(C: number, randn: Randn): Float32Array {
  const w = randn(C * C * 9, 0.01);
  for (let c = 0; c < C; c++) w[(c * C + c) * 9 + 4] = (w[(c * C + c) * 9 + 4] as number) + 1;
  return w;
}

function silu(g: OnnxGraph, x: string): string {
  return g.op1('Mul', [x, g.op1('Sigmoid', [x])]);
}
