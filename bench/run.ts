/**
 * `npm run bench -- <name> [--flags]`: runs bench/<name>.ts, whose default export takes the
 * parsed flags. Each benchmark prints a table and writes JSON to bench/results/.
 */
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from './lib.ts';

const here = dirname(fileURLToPath(import.meta.url));
const [name, ...rest] = process.argv.slice(2);
const available = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && !['run.ts', 'lib.ts'].includes(f))
  .map((f) => f.slice(0, -3));

if (!name || !available.includes(name)) {
  console.error(`usage: npm run bench -- <name> [--flags]\navailable: ${available.join(', ')}`);
  process.exit(name ? 2 : 0);
}
const file = join(here, `${name}.ts`);
if (!existsSync(file)) process.exit(2);
const mod = (await import(pathToFileURL(file).href)) as { default: (args: Map<string, string>) => Promise<void> };
await mod.default(parseArgs(rest));
