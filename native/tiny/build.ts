/**
 * CLI: writes the tiny demo models.
 *   node --import tsx native/tiny/build.ts <modelsDir> [--model-id <id>]… [--embed-dim 32] [--seed 1234]
 * Without --model-id it writes one demo model under each Daydream model id, each with its family's
 * runnable ControlNets and (SD1.5, SDXL) the IP-Adapter image encoder.
 */
import { parseArgs } from 'node:util';
import { buildTinyModel, DEMO_MODEL_IDS, demoModelOptions } from './TinyModelBuilder.ts';
import { buildTinyPreprocessors } from './TinyPreprocessors.ts';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'model-id': { type: 'string', multiple: true },
    'embed-dim': { type: 'string' },
    seed: { type: 'string' },
  },
});
const modelsDir = positionals[0];
if (!modelsDir) {
  console.error('usage: build.ts <modelsDir> [--model-id <id>]… [--embed-dim N] [--seed N]');
  process.exit(2);
}
for (const id of values['model-id'] ?? DEMO_MODEL_IDS) {
  const dir = buildTinyModel(modelsDir, id, {
    ...demoModelOptions(id),
    ...(values['embed-dim'] ? { embedDim: Number(values['embed-dim']) } : {}),
    ...(values.seed ? { seed: Number(values.seed) } : {}),
  });
  console.log(`wrote demo model ${id} → ${dir}`);
}
for (const dir of buildTinyPreprocessors(modelsDir)) console.log(`wrote demo preprocessor → ${dir}`);
