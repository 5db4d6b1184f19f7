/**
 * The ONNX model behind a model-backed ControlNet preprocessor (`depth_tensorrt`, `pose_tensorrt`,
 * `soft_edge`): where it lives, which I/O it must have, which execution providers it runs on, and
 * whether it is a real export or a tiny demo (docs/models.md "ControlNet preprocessors").
 *
 * Layout: `<modelsDir>/preprocessors/<folder>/model.onnx` plus `config.json` (`"_demo": true` marks
 * a demo written by native/tiny/TinyPreprocessors.ts). Opened in the pipeline's own worker thread,
 * beside the ControlNet that uses it.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { InferenceError, ModelLoadError } from '../errors.ts';
import type { ProviderName } from '../ModelSessions.ts';
import { isModelPreprocessor, MODEL_PREPROCESSOR_NAMES, type ModelPreprocessorName } from './ControlNetPreprocessors.ts';

// The names live in the one preprocessor list; re-exported for the folder's model-side users.
export { MODEL_PREPROCESSOR_NAMES, isModelPreprocessor, type ModelPreprocessorName };

/**
 * - `depth_tensorrt`: Depth Anything V2 small (transformers ONNX export): `pixel_values`
 *   [B,3,H,W] ImageNet-normalised RGB, H and W multiples of 14 → `predicted_depth` [B,H,W]
 *   (relative inverse depth: larger is nearer);
 * - `pose_tensorrt`: OpenPose body (CMU COCO-18 two-branch net, as controlnet_aux's
 *   body_pose_model): `image` [B,3,H,W] RGB scaled x/256 − 0.5, H and W multiples of 8 → `paf`
 *   [B,38,H/8,W/8] part affinity fields and `heatmap` [B,19,H/8,W/8] (18 keypoints + background);
 * - `soft_edge`: HED (controlnet_aux's ControlNetHED_Apache2 with the five side outputs fused and a
 *   sigmoid applied): `image` [B,3,H,W] RGB in [0,255] → `edges` [B,1,H,W] in [0,1].
 */

export interface PreprocessorContract {
  /** Folder under `<modelsDir>/preprocessors/`. */
  folder: string;
  /** Input name → rank-4 NCHW float32 (batch and spatial axes dynamic). */
  input: string;
  /** Output names and their ranks. */
  outputs: Record<string, number>;
  /** Spatial size must be a multiple of this. */
  multiple: number;
  /** Execution providers in order of preference; the `_tensorrt` names ask for TensorRT first. */
  providers: ProviderName[];
}

export const PREPROCESSOR_CONTRACTS: Readonly<Record<ModelPreprocessorName, PreprocessorContract>> = Object.freeze({
  depth_tensorrt: { folder: 'depth-anything-v2-small', input: 'pixel_values', outputs: { predicted_depth: 3 }, multiple: 14, providers: ['tensorrt', 'cuda', 'cpu'] },
  pose_tensorrt: { folder: 'openpose-body', input: 'image', outputs: { paf: 4, heatmap: 4 }, multiple: 8, providers: ['tensorrt', 'cuda', 'cpu'] },
  soft_edge: { folder: 'hed', input: 'image', outputs: { edges: 4 }, multiple: 8, providers: ['cuda', 'cpu'] },
});


export function preprocessorDir(modelsDir: string, name: ModelPreprocessorName): string {
  return join(modelsDir, 'preprocessors', PREPROCESSOR_CONTRACTS[name].folder);
}

/** What a loaded preprocessor model reports in status, logs and /metrics. */
export interface PreprocessorModelInfo {
  name: ModelPreprocessorName;
  /** A tiny random-weight demo with the real I/O (config.json `_demo`). */
  demo: boolean;
  /** Providers the session really uses. */
  providers: ProviderName[];
  /** Why they differ from what the name asked for (e.g. TensorRT not in this build), or null. */
  providerNote: string | null;
}

export class PreprocessorModel {
  readonly info: PreprocessorModelInfo;
  readonly contract: PreprocessorContract;
  readonly #session: ort.InferenceSession;

  private constructor(info: PreprocessorModelInfo, session: ort.InferenceSession) {
    this.info = info;
    this.contract = PREPROCESSOR_CONTRACTS[info.name];
    this.#session = session;
  }

  /**
   * Opens `name`'s model, trying its providers in order (TensorRT first for `_tensorrt` names) and
   * falling back with a note; checks the I/O names against the contract.
   */
  static async open(modelsDir: string, name: ModelPreprocessorName): Promise<PreprocessorModel> {
    const c = PREPROCESSOR_CONTRACTS[name];
    const dir = preprocessorDir(modelsDir, name);
    const file = join(dir, 'model.onnx');
    if (!existsSync(file)) throw new ModelLoadError(dir, `preprocessor ${name} needs ${c.folder}/model.onnx under preprocessors/ (export it with native/export, or enable DEMO_MODELS)`);
    let demo = false;
    try {
      demo = (JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { _demo?: unknown })._demo === true;
    } catch {
      demo = false;
    }
    const failures: string[] = [];
    // Providers this onnxruntime-node build lacks are skipped without a try (each failed try logs
    // a load error from ORT itself), as ModelSessions does.
    const available = new Set(ort.listSupportedBackends().map((b) => b.name));
    for (const [i, p] of c.providers.entries()) {
      if (p !== 'cpu' && !available.has(p)) {
        failures.push(`${p}: not in this onnxruntime-node build`);
        continue;
      }
      let session: ort.InferenceSession;
      try {
        session = await ort.InferenceSession.create(file, { executionProviders: [p], graphOptimizationLevel: 'all' });
      } catch (err) {
        failures.push(`${p}: ${(err as Error).message.split('\n')[0] ?? ''}`);
        continue;
      }
      const missing = [c.input, ...Object.keys(c.outputs)].filter((n) => !session.inputNames.includes(n) && !session.outputNames.includes(n));
      if (missing.length > 0) {
        await session.release();
        throw new ModelLoadError(file, `preprocessor ${name} model lacks ${missing.join(', ')} (contract: ${c.input} → ${Object.keys(c.outputs).join(', ')})`);
      }
      const note = i === 0 ? null : `${name} asked for ${c.providers[0]}; running on ${p} (${failures.join('; ')})`;
      return new PreprocessorModel({ name, demo, providers: [p], providerNote: note }, session);
    }
    throw new ModelLoadError(file, `no execution provider could open preprocessor ${name}: ${failures.join('; ')}`);
  }

  /** One run; returns the outputs by name. */
  async run(input: Float32Array, dims: [number, number, number, number]): Promise<Record<string, ort.Tensor>> {
    try {
      return (await this.#session.run({ [this.contract.input]: new ort.Tensor('float32', input, dims) })) as Record<string, ort.Tensor>;
    } catch (err) {
      throw new InferenceError(`preprocessor:${this.info.name}`, (err as Error).message, { cause: err });
    }
  }

  async close(): Promise<void> {
    await this.#session.release();
  }
}
