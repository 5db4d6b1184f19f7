/**
 * The `use_safety_checker` slot: an optional `safety_checker/model.onnx` in the model folder with
 * input `clip_input` [B,3,224,224] (CLIP-normalised) and output `scores` [B] in [0,1]. A frame whose
 * score exceeds `safety_checker_threshold` is blanked (black) and counted. The tiny builder's checker
 * is a demo (it flags near-white frames); a real export wraps diffusers' StableDiffusionSafetyChecker
 * to emit its concept scores under that name.
 */
import { join } from 'node:path';
import { existsSync } from 'node:fs';
import * as ort from 'onnxruntime-node';
import { CLIP_SIZE, clipPixels } from './ClipImage.ts';
import { ModelLoadError } from './errors.ts';
import type { Frame } from './Frame.ts';
import type { ModelSessions } from './ModelSessions.ts';

export class SafetyChecker {
  readonly #session: ort.InferenceSession;
  readonly #sessions: ModelSessions;
  readonly #pixels = new Float32Array(3 * CLIP_SIZE * CLIP_SIZE);

  private constructor(session: ort.InferenceSession, sessions: ModelSessions) {
    this.#session = session;
    this.#sessions = sessions;
  }

  /** Opens the model folder's checker, or returns null when the folder has none. */
  static async open(sessions: ModelSessions): Promise<SafetyChecker | null> {
    const file = join(sessions.info.modelDir, 'safety_checker', 'model.onnx');
    if (!existsSync(file)) return null;
    const s = await sessions.openExtra(file);
    if (!s.inputNames.includes('clip_input') || !s.outputNames.includes('scores')) {
      throw new ModelLoadError(file, `safety checker needs input clip_input and output scores (has ${s.inputNames.join(',')} → ${s.outputNames.join(',')})`);
    }
    return new SafetyChecker(s, sessions);
  }

  /** The frame's score in [0,1]. */
  async score(frame: Frame): Promise<number> {
    clipPixels(frame, this.#pixels);
    const out = await this.#sessions.runExtra('safety_checker', this.#session, {
      clip_input: new ort.Tensor('float32', this.#pixels, [1, 3, CLIP_SIZE, CLIP_SIZE]),
    });
    return ((out.scores as ort.Tensor).data as Float32Array)[0] as number;
  }
}
