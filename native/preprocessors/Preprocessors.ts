/**
 * Opens the model-backed ControlNet preprocessor `name` (the model, then its pre/post-processing).
 */
import { DepthPreprocessor } from './DepthPreprocessor.ts';
import { parsePreprocessorParams, type ModelPreprocessor } from './ModelPreprocessor.ts';
import { PosePreprocessor } from './PosePreprocessor.ts';
import { PreprocessorModel, type ModelPreprocessorName } from './PreprocessorModel.ts';
import { SoftEdgePreprocessor } from './SoftEdgePreprocessor.ts';

export async function openModelPreprocessor(modelsDir: string, name: ModelPreprocessorName, params: unknown): Promise<ModelPreprocessor> {
  // Params first: a bad one is the caller's error, not a load failure.
  parsePreprocessorParams(name, params);
  const model = await PreprocessorModel.open(modelsDir, name);
  switch (name) {
    case 'depth_tensorrt':
      return new DepthPreprocessor(model, params);
    case 'pose_tensorrt':
      return new PosePreprocessor(model, params);
    case 'soft_edge':
      return new SoftEdgePreprocessor(model, params);
  }
}
