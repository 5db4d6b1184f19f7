/**
 * `soft_edge`: HED. The frame is scaled to detect_resolution², fed as RGB in [0,255], and the fused
 * edge probability map (sigmoid, [0,1]) becomes a grey image; `safe` quantises it to 3 levels as
 * controlnet_aux's `safe_step` does (fewer spurious faint edges).
 */
import type { Frame } from '../Frame.ts';
import { greyFrame, ModelPreprocessor, toNchw } from './ModelPreprocessor.ts';
import type { PreprocessorModel } from './PreprocessorModel.ts';

export class SoftEdgePreprocessor extends ModelPreprocessor<'soft_edge'> {
  constructor(model: PreprocessorModel, params: unknown) {
    super('soft_edge', model, params);
  }

  async apply(frame: Frame): Promise<Frame> {
    const side = this.params.detect_resolution;
    const out = await this.model.run(
      toNchw(frame, side, (v) => v),
      [1, 3, side, side],
    );
    const edges = out['edges'];
    if (!edges) throw new Error('edges missing');
    const [, , h = side, w = side] = edges.dims as number[];
    let map = edges.data as Float32Array;
    if (this.params.safe) {
      // controlnet_aux safe_step(x, step=2): floor(x·3)/2, clipped to [0,1].
      map = map.map((v) => Math.min(1, Math.floor(v * 3) / 2));
    }
    return greyFrame(map, w, h, frame.width, frame.height, frame.ptsMs);
  }
}
