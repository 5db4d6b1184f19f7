import { z } from 'zod';
import type { Frame } from '../Frame.ts';
import { defineProcessor } from './Processor.ts';

/**
 * Params of `feedback` (livepeer fork `processors/feedback.py`): out = (1−s)·input + s·previous,
 * s clamped to [0,1], default 0.5.
 */
export const feedbackParams = z.object({
  feedback_strength: z.number().min(0).max(1).optional(),
  /** Alias accepted for brevity; `feedback_strength` wins when both are given. */
  strength: z.number().min(0).max(1).optional(),
});

/**
 * Blends the input with the previous *pipeline output* when the pipeline reports it
 * (`observeOutput`), else with this processor's own previous output. The first frame, and any frame
 * whose size differs from the previous one, passes through.
 */
export const feedback = defineProcessor({
  type: 'feedback',
  kind: 'image',
  params: feedbackParams,
  create: (p) => {
    const s = p.feedback_strength ?? p.strength ?? 0.5;
    let prev: Frame | null = null;
    let observed = false;
    return {
      type: 'feedback',
      process: (f) => {
        let out = f;
        if (prev && prev.width === f.width && prev.height === f.height && s > 0) {
          const a = f.data;
          const b = prev.data;
          const data = new Uint8Array(a.length);
          const k = 1 - s;
          for (let i = 0; i < a.length; i++) data[i] = (k * (a[i] as number) + s * (b[i] as number) + 0.5) | 0;
          out = { width: f.width, height: f.height, ptsMs: f.ptsMs, data };
        }
        // A copy when it is the caller's input: the caller may reuse that buffer for its next frame.
        if (!observed) prev = out === f ? { ...f, data: f.data.slice() } : out;
        return out;
      },
      observeOutput: (f) => {
        observed = true;
        // A copy: the caller owns the output buffer (it may hand it back for reuse, or a worker
        // may transfer it to another thread), so holding a reference would alias a later frame.
        prev = { width: f.width, height: f.height, ptsMs: f.ptsMs, data: f.data.slice() };
      },
      reset: () => {
        prev = null;
        observed = false;
      },
    };
  },
});
