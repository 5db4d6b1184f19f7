// The production build: TypeScript sources → JavaScript in dist/, which `npm start`, `./reverie up`
// and the container images run, so no process (nor any worker thread) loads tsx at start. Tests
// and development keep running the sources through tsx.
//
//   node bin/build.js              build dist/ (npm run build)
//   node bin/build.js --if-stale   build only when dist/ is missing or older than the sources
//   node bin/build.js --out DIR    build into DIR instead (DIR inside the checkout, so the built
//                                  modules find node_modules)
//
// Plain JavaScript, not TypeScript: bin/reverie.js asks isBuildCurrent() on every start, before
// anything could load tsx. The build itself only emits (TypeScript's `noCheck`, about 7 s instead
// of 36 s on the dev VM): `npm run typecheck` (part of `npm test`) is where types are checked; with
// `isolatedModules` each file's JavaScript does not depend on the checker.
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The checkout (or the image's /app). */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the build goes: git- and docker-ignored, the same layout as the sources. */
export const DEFAULT_OUT = join(ROOT, 'dist');
/** The server's source folders (not test/ or bench/, which always run through tsx). */
export const SOURCE_DIRS = ['control', 'errors', 'images', 'media', 'native', 'outbound', 'songs', 'store', 'streams', 'webhooks'];
/**
 * Files the modules read next to themselves (through import.meta.url), copied to the same place in
 * the build: the pages (control/routes/web.ts reads ../../web), the word lists, the GStreamer addon
 * (media/gst/gst.ts loads it from beside itself, the doctor from media/gst/). A missing one is skipped: the addon is
 * absent on a machine without GStreamer's headers, and the code says so when it is needed.
 */
export const ASSETS = ['web', 'songs/data', 'streams/data', 'media/gst/build/Release/reverie_gst.node'];
/** Written last into a finished build; its mtime is the time the build started. */
const STAMP = '.build.json';
/** Also inputs: the compiler options, package.json (its "type" makes NodeNext emit ESM) and this recipe. */
const CONFIG_FILES = ['tsconfig.json', 'package.json', 'bin/build.js'];

/**
 * The newest modification time (ms) among the build's inputs under `root`: every file and folder
 * of the sources and assets (a folder's mtime moves when a file in it is added, removed or
 * renamed), the compiler options, package.json and this recipe. The addon's build folder counts
 * only through the addon itself. 0 when there are no sources: an image that ships dist/ alone has
 * nothing to rebuild from (and its copied files' times say nothing about the build's).
 */
export function newestInput(root = ROOT) {
  if (!SOURCE_DIRS.some((d) => existsSync(join(root, d)))) return 0;
  let newest = 0;
  const visit = (path) => {
    let st;
    try {
      st = statSync(path);
    } catch {
      return; // absent (an image without sources, a machine without the addon)
    }
    newest = Math.max(newest, st.mtimeMs);
    if (!st.isDirectory() || path === join(root, 'media/gst/build')) return;
    for (const name of readdirSync(path)) visit(join(path, name));
  };
  for (const p of [...SOURCE_DIRS, ...ASSETS, ...CONFIG_FILES]) visit(join(root, p));
  return newest;
}

/**
 * Whether `out` holds a finished build at least as new as every input: what `--if-stale`,
 * `npm start`, `./reverie up` and bin/reverie.js decide by (make's rule: compare modification
 * times, so a `git checkout` or an edit after the build makes it stale).
 */
export function buildState(root = ROOT, out = DEFAULT_OUT) {
  let built;
  try {
    built = statSync(join(out, STAMP)).mtimeMs;
  } catch {
    return { current: false, reason: 'missing' };
  }
  return newestInput(root) > built ? { current: false, reason: 'older than the sources' } : { current: true, reason: 'current' };
}

function sourceFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return p.endsWith(join('media', 'gst', 'build')) ? [] : sourceFiles(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

/**
 * Emits the sources into a fresh folder beside `out`, copies the assets, writes the stamp, then
 * swaps it in, so a process starting meanwhile sees the old build or the new one, never half of
 * one. Throws on an option or syntax error (with TypeScript's messages).
 */
export async function build({ root = ROOT, out = DEFAULT_OUT, log = (line) => process.stderr.write(`${line}\n`) } = {}) {
  const started = Date.now();
  let ts;
  try {
    ts = createRequire(import.meta.url)('typescript');
  } catch (err) {
    throw new Error('the build needs TypeScript, a dev dependency: run `npm ci` (without --omit=dev), then `npm run build`', { cause: err });
  }
  const next = `${out}.next-${process.pid}`;
  rmSync(next, { recursive: true, force: true });
  const parsed = ts.getParsedCommandLineOfConfigFile(join(root, 'tsconfig.json'), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => log(ts.flattenDiagnosticMessageText(d.messageText, '\n')) });
  if (!parsed) throw new Error(`cannot read ${join(root, 'tsconfig.json')}`);
  const options = {
    ...parsed.options,
    noEmit: false,
    outDir: next,
    rootDir: root,
    // Our imports name the .ts files (Node runs them that way through tsx); the build's name the .js.
    rewriteRelativeImportExtensions: true,
    allowImportingTsExtensions: true,
    noCheck: true,
    declaration: false,
    sourceMap: false,
    incremental: false,
    tsBuildInfoFile: undefined,
  };
  const roots = SOURCE_DIRS.filter((d) => existsSync(join(root, d))).flatMap((d) => sourceFiles(join(root, d)));
  const program = ts.createProgram(roots, options);
  const result = program.emit();
  const errors = [...program.getOptionsDiagnostics(), ...program.getSyntacticDiagnostics(), ...result.diagnostics].filter((d) => d.category === ts.DiagnosticCategory.Error);
  if (errors.length > 0 || result.emitSkipped) {
    rmSync(next, { recursive: true, force: true });
    const host = { getCanonicalFileName: (f) => f, getCurrentDirectory: () => root, getNewLine: () => '\n' };
    throw new Error(`the build failed:\n${ts.formatDiagnostics(errors, host)}`);
  }
  for (const asset of ASSETS) {
    const from = join(root, asset);
    if (!existsSync(from)) continue;
    const to = join(next, asset);
    mkdirSync(dirname(to), { recursive: true });
    if (statSync(from).isDirectory()) cpSync(from, to, { recursive: true });
    else copyFileSync(from, to);
  }
  const stamp = join(next, STAMP);
  writeFileSync(stamp, `${JSON.stringify({ builtAt: new Date(started).toISOString(), node: process.version, files: roots.length })}\n`);
  // The stamp dates from the start: a source saved while the build ran leaves the build stale.
  utimesSync(stamp, started / 1000, started / 1000);
  // Two builds at once (two starts): each swaps in its own complete folder; the later one wins.
  const old = `${out}.old-${process.pid}`;
  const ignore = (codes, fn) => {
    try {
      fn();
    } catch (err) {
      if (!codes.includes(err.code)) throw err;
    }
  };
  ignore(['ENOENT'], () => renameSync(out, old));
  ignore(['ENOTEMPTY', 'EEXIST'], () => renameSync(next, out));
  rmSync(old, { recursive: true, force: true });
  rmSync(next, { recursive: true, force: true });
  log(`build: ${roots.length} modules → ${relative(root, out) || out} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return { files: roots.length, out };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const at = args.indexOf('--out');
  const out = at >= 0 && args[at + 1] ? resolve(args[at + 1]) : DEFAULT_OUT;
  const state = buildState(ROOT, out);
  if (args.includes('--if-stale') && state.current) {
    process.stderr.write(`build: ${relative(ROOT, out) || out} is current\n`);
  } else {
    try {
      if (args.includes('--if-stale')) process.stderr.write(`build: ${relative(ROOT, out) || out} is ${state.reason}: building\n`);
      await build({ out });
    } catch (err) {
      process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    }
  }
}
