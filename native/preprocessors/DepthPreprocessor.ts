/**
 * `depth_tensorrt`: Depth Anything V2 small. The frame is scaled to detect_resolution² (a multiple
 * of 14, the ViT patch), ImageNet-normalised, and the relative inverse depth it predicts is
 * min–max normalised into a grey image (near = white), as controlnet_aux's depth annotators draw it.
 */
import type { Frame } from '../Frame.ts';
import { greyFrame, ModelPreprocessor, toNchw } from './ModelPreprocessor.ts';
import type { PreprocessorModel } from './PreprocessorModel.ts';

const MEAN = [0.485, 0.456, 0.406];
const STD = [0.229, 0.224, 0.225];

export class DepthPreprocessor extends ModelPreprocessor<'depth_tensorrt'> {
  constructor(model: PreprocessorModel, params: unknown) {
    super('depth_tensorrt', model, params);
  }

  async apply(frame: Frame): Promise<Frame> {
    const side = this.params.detect_resolution;
    const x = toNchw(frame, side, (v, c) => (v / 255 - (MEAN[c] as number)) / (STD[c] as number));
    const out = await this.model.run(x, [1, 3, side, side]);
    const depth = out['predicted_depth'];
    if (!depth) throw new Error('predicted_depth missing');
    const [, h = side, w = side] = depth.dims as number[];
    const d = depth.data as Float32Array;
    let lo = Infinity;
    let hi = -Infinity;
    for (let i = 0; i < h * w; i++) {
      const v = d[i] as number;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    const span = hi - lo > 1e-6 ? hi - lo : 1;
    const norm = new Float32Array(h * w);
    for (let i = 0; i < h * w; i++) norm[i] = ((d[i] as number) - lo) / span;
    return greyFrame(norm, w, h, frame.width, frame.height, frame.ptsMs);
  }
}
