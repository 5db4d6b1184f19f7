/**
 * One loaded ControlNet (diffusers ControlNetModel exported to ONNX): inputs `sample` [B,C,h,w],
 * `timestep` [B], `encoder_hidden_states` [B,S,D], `controlnet_cond` [B,3,H,W] in [0,1],
 * `conditioning_scale` (float scalar); outputs `down_block_res_sample_<i>`… and
 * `mid_block_res_sample`, which map in order onto the UNet's `down_block_additional_residual_<i>`…
 * and `mid_block_additional_residual`. Its preprocessor turns the input frame into the control
 * image; `conditioning_scale` is hot, `control_guidance_start/end` gate it per Stream Batch slot.
 */
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { ModelLoadError } from './errors.ts';
import type { Frame } from './Frame.ts';
import type { ModelSessions, ResidualInput } from './ModelSessions.ts';
import type { ModelPreprocessor } from './preprocessors/ModelPreprocessor.ts';
import { isModelPreprocessor } from './preprocessors/PreprocessorModel.ts';
import { openModelPreprocessor } from './preprocessors/Preprocessors.ts';
import { createProcessorChain, type ProcessorChain } from './processors/ProcessorChain.ts';
import { checkControlNetPreprocessor, type ControlNetParams } from './params/index.ts';

export const CN_DOWN_PREFIX = 'down_block_res_sample_';
export const CN_MID = 'mid_block_res_sample';

/** byte → [0,1] (diffusers control images are not normalised to [-1,1]). */
const U8_TO_01 = Float32Array.from({ length: 256 }, (_, b) => b / 255);

/** Folder of a ControlNet under the models root: `<modelsDir>/controlnet/<model_id>/model.onnx`. */
export function controlNetFile(modelsDir: string, modelId: string): string {
  return join(modelsDir, 'controlnet', modelId, 'model.onnx');
}

/** The control-image maker of one ControlNet: an image processor chain, or a model-backed preprocessor. */
type Pre = { kind: 'chain'; chain: ProcessorChain<Frame> } | { kind: 'model'; model: ModelPreprocessor };

export class ControlNet {
  readonly modelId: string;
  /** Hot: multiplies the residuals; 0 skips the run entirely. */
  scale: number;
  /** Fractions of denoising [0,1] between which the control applies (diffusers semantics). */
  guidanceStart: number;
  guidanceEnd: number;
  readonly #session: ort.InferenceSession;
  readonly #sessions: ModelSessions;
  #pre: Pre;
  readonly #preName: string;
  /** ms the preprocessor took on the last frame (stageMs.control). */
  lastPrepareMs = 0;
  readonly #outNames: string[];
  #cond = new Float32Array(0);
  #scaleBuf = new Float32Array(1);
  /**
   * Output tensors per sample shape, written by ORT on every run: a real ControlNet's residuals
   * are ~34 MB per batch entry at 512² (SD), too much to allocate per frame.
   */
  readonly #outputs = new Map<string, { tensors: ort.Tensor[]; fetches: Record<string, ort.Tensor> }>();

  private constructor(modelId: string, session: ort.InferenceSession, sessions: ModelSessions, pre: Pre, outNames: string[], cfg: ControlNetParams) {
    this.modelId = modelId;
    this.#preName = cfg.preprocessor ?? 'passthrough';
    this.#session = session;
    this.#sessions = sessions;
    this.#pre = pre;
    this.#outNames = outNames;
    this.scale = cfg.conditioning_scale;
    this.guidanceStart = numberOr(cfg.control_guidance_start, 0);
    this.guidanceEnd = numberOr(cfg.control_guidance_end, 1);
  }

  static async open(sessions: ModelSessions, modelsDir: string, cfg: ControlNetParams): Promise<ControlNet> {
    checkControlNetPreprocessor(cfg);
    const residuals = sessions.info.residualInputs;
    if (residuals.length === 0) {
      throw new ModelLoadError(sessions.info.modelDir, `ControlNet ${cfg.model_id} needs a UNet exported with ControlNet residual inputs (${'down_block_additional_residual_<i>'}, mid_block_additional_residual)`);
    }
    const session = await sessions.openExtra(controlNetFile(modelsDir, cfg.model_id));
    const want = ['sample', 'timestep', 'encoder_hidden_states', 'controlnet_cond', 'conditioning_scale'];
    const missing = want.filter((n) => !session.inputNames.includes(n));
    const outNames = [
      ...session.outputNames.filter((n) => n.startsWith(CN_DOWN_PREFIX)).sort((a, b) => Number(a.slice(CN_DOWN_PREFIX.length)) - Number(b.slice(CN_DOWN_PREFIX.length))),
      ...session.outputNames.filter((n) => n === CN_MID),
    ];
    if (missing.length > 0 || outNames.length !== residuals.length || outNames[outNames.length - 1] !== CN_MID) {
      throw new ModelLoadError(
        controlNetFile(modelsDir, cfg.model_id),
        `ControlNet I/O mismatch: missing inputs [${missing.join(',')}], ${outNames.length} residual outputs for ${residuals.length} UNet residual inputs`,
      );
    }
    const name = cfg.preprocessor ?? 'passthrough';
    const pre: Pre = isModelPreprocessor(name)
      ? { kind: 'model', model: await openModelPreprocessor(modelsDir, name, cfg.preprocessor_params ?? {}) }
      : { kind: 'chain', chain: createProcessorChain({ processors: [{ type: name, params: cfg.preprocessor_params ?? {} }] }, 'image') };
    return new ControlNet(cfg.model_id, session, sessions, pre, outNames, cfg);
  }

  /** The model-backed preprocessor's model info (demo, providers), or null for image-processor ones. */
  get preprocessorInfo(): (ModelPreprocessor['info'] & { preprocessor: string }) | null {
    return this.#pre.kind === 'model' ? { ...this.#pre.model.info, preprocessor: this.#preName } : null;
  }

  /** Hot: new `preprocessor_params` for the same preprocessor, from the next frame. Throws when invalid. */
  setPreprocessorParams(params: Record<string, unknown>): void {
    if (this.#pre.kind === 'model') this.#pre.model.setParams(params);
    else this.#pre = { kind: 'chain', chain: createProcessorChain({ processors: [{ type: this.#preName, params }] }, 'image') };
  }

  async close(): Promise<void> {
    if (this.#pre.kind === 'model') await this.#pre.model.close();
  }

  /**
   * Whether the control applies to a slot at grid index `tIndex` of `steps` (diffusers:
   * keep = !(i/N < start || (i+1)/N > end)).
   */
  activeAt(tIndex: number, steps: number): boolean {
    return !(tIndex / steps < this.guidanceStart || (tIndex + 1) / steps > this.guidanceEnd);
  }

  /** Builds the control image for this frame, replicated over `batch` entries ([B,3,H,W] in [0,1]). */
  async prepare(frame: Frame, batch: number): Promise<ort.Tensor> {
    const t0 = performance.now();
    let img: Frame;
    if (this.#pre.kind === 'model') {
      img = await this.#pre.model.apply(frame);
    } else {
      img = this.#pre.chain.apply(frame);
      this.#pre.chain.observeOutput(img);
    }
    this.lastPrepareMs = performance.now() - t0;
    const n = img.width * img.height;
    const size = 3 * n;
    if (this.#cond.length < batch * size) this.#cond = new Float32Array(batch * size);
    const c = this.#cond;
    const d = img.data;
    const lut = U8_TO_01;
    for (let i = 0, j = 0; i < n; i++, j += 3) {
      c[i] = lut[d[j] as number] as number;
      c[n + i] = lut[d[j + 1] as number] as number;
      c[2 * n + i] = lut[d[j + 2] as number] as number;
    }
    for (let b = 1; b < batch; b++) c.copyWithin(b * size, 0, size);
    return new ort.Tensor('float32', c.subarray(0, batch * size), [batch, 3, img.height, img.width]);
  }

  /**
   * One ControlNet run; returns the residuals in UNet input order, in buffers this ControlNet owns
   * and rewrites on its next run (the caller may change them in place until then).
   */
  async run(sample: ort.Tensor, timestep: ort.Tensor, ehs: ort.Tensor, cond: ort.Tensor): Promise<ort.Tensor[]> {
    this.#scaleBuf[0] = this.scale;
    const [b, , h, w] = sample.dims as [number, number, number, number];
    const key = `${b}x${h}x${w}`;
    let out = this.#outputs.get(key);
    if (!out) {
      const tensors = zeroResiduals(this.#sessions.info.residualInputs, b, h, w);
      out = { tensors, fetches: Object.fromEntries(this.#outNames.map((n, i) => [n, tensors[i] as ort.Tensor])) };
      this.#outputs.set(key, out);
    }
    await this.#sessions.runExtra(
      `controlnet:${this.modelId}`,
      this.#session,
      {
        sample,
        timestep,
        encoder_hidden_states: ehs,
        controlnet_cond: cond,
        conditioning_scale: new ort.Tensor('float32', this.#scaleBuf.subarray(0, 1), []),
      },
      out.fetches,
    );
    return out.tensors;
  }

  reset(): void {
    if (this.#pre.kind === 'chain') this.#pre.chain.reset();
  }
}

/** Residual tensors of zeros for a batch, shaped per the UNet's residual inputs. */
export function zeroResiduals(inputs: readonly ResidualInput[], batch: number, latentH: number, latentW: number): ort.Tensor[] {
  return inputs.map((r) => {
    const h = Math.ceil(latentH / r.factor);
    const w = Math.ceil(latentW / r.factor);
    return new ort.Tensor('float32', new Float32Array(batch * r.channels * h * w), [batch, r.channels, h, w]);
  });
}

function numberOr(v: unknown, d: number): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : d;
}
