#!/usr/bin/env node
// The `reverie` command. Runs the build (dist/, JavaScript: `npm run build`) when it is current,
// so neither this process nor its worker threads load tsx; otherwise the TypeScript sources through
// tsx's loader, as development and the tests do (slower to start: docs/performance.md,
// "Start-up"). `npm start` and `./reverie up` build first when the build is missing or stale; this
// entry never builds by itself (a container has no compiler, a CLI call should not wait for one).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildState, DEFAULT_OUT } from './build.js';

const state = buildState();
if (state.current) {
  await import(pathToFileURL(join(DEFAULT_OUT, 'control', 'main.js')).href);
} else {
  if (process.argv[2] === 'serve') process.stderr.write(`reverie: running the sources through tsx (the build is ${state.reason}: npm run build)\n`);
  const { register } = await import('tsx/esm/api');
  register();
  await import('../control/main.ts');
}
