/**
 * The models a media node serves: the exports under MODELS_DIR, and tiny random-weight demo models
 * written for the ids without one when DEMO_MODELS is on (docs/models.md).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { MODEL_IDS } from '../native/params/index.ts';

/**
 * Which of the four models the local node has: the ones exported under MODELS_DIR. With
 * `demoModels` on, a model id without an export gets tiny random-weight demo models (native's
 * builder) so the live path runs end to end; `demo` is true when any served model is one.
 */
export async function prepareModels(modelsDir: string, demoModels: boolean, logger: Logger): Promise<{ models: string[]; demo: boolean }> {
  // The engine's entry loads ONNX Runtime: only a media node that prepares models pays for it.
  const { buildTinyModel, buildTinyPreprocessors, demoModelOptions, isCurrentDemoModel } = await import('../native/index.ts');
  const hasExport = (id: string) => existsSync(join(modelsDir, id, 'unet'));
  if (demoModels) {
    for (const id of MODEL_IDS) {
      // Real exports are never touched; demo folders an older builder wrote (without ControlNet
      // residual inputs or the IP-Adapter image encoder) are written again.
      if (hasExport(id) && (!isDemoModel(join(modelsDir, id)) || isCurrentDemoModel(modelsDir, id))) continue;
      const o = demoModelOptions(id);
      buildTinyModel(modelsDir, id, o);
      logger.warn(
        `prepareModels() | no export of ${id} under ${modelsDir}: wrote a tiny DEMO model (random weights) [controlnets:${(o.controlNets ?? []).join(',') || '-'}] [ip_adapter:${o.imageEncoder ? 'yes' : 'no'}]`,
      );
    }
  }
  if (demoModels) {
    // Model-backed ControlNet preprocessors (depth_tensorrt, pose_tensorrt, soft_edge) without an
    // export get demo models with the real I/O, labelled demo in status, logs and /metrics.
    for (const dir of buildTinyPreprocessors(modelsDir)) logger.warn(`prepareModels() | no preprocessor export in ${dir}: wrote a tiny DEMO preprocessor model`);
  }
  const models = MODEL_IDS.filter(hasExport);
  if (models.length === 0) {
    logger.warn(`prepareModels() | no model export under ${modelsDir} and DEMO_MODELS is off: this media node takes no streams (export models, see docs/models.md, or set DEMO_MODELS=true)`);
  }
  const demo = models.some((id) => isDemoModel(join(modelsDir, id)));
  return { models, demo };
}

function isDemoModel(dir: string): boolean {
  try {
    return Boolean((JSON.parse(readFileSync(join(dir, 'model_index.json'), 'utf8')) as { _demo?: unknown })._demo);
  } catch {
    return false;
  }
}
