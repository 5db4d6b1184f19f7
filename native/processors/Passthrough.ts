import { z } from 'zod';
import { defineProcessor } from './Processor.ts';

/** Returns its input unchanged (valid in both chains; Daydream uses it as a ControlNet no-op). */
export const passthroughImage = defineProcessor({
  type: 'passthrough',
  kind: 'image',
  params: z.object({}),
  create: () => ({ type: 'passthrough', process: (f) => f, reset: () => {} }),
});
