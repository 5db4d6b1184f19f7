/**
 * The production build (bin/build.js): the server as JavaScript, which `npm start`, `./reverie up`
 * and the images run. Built once here, by the real script, into a folder under test/artifacts
 * (inside the checkout, so the built modules find node_modules; the checkout's own dist/ is left
 * alone), then run without tsx: the server answers /readyz, serves its pages and renders a song on
 * its render thread; the engine thread runs a frame. Freshness follows the inputs' times.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pino from 'pino';
import t from 'tap';
import { build, buildState, SOURCE_DIRS } from '../../bin/build.js';
import type * as Native from '../../native/index.ts';
import { freePort } from '../helpers/net.ts';
import { until } from '../helpers/until.ts';
import { PARTS } from '../structure/importGraph.ts';

const run = promisify(execFile);
const ROOT = new URL('../..', import.meta.url).pathname;
mkdirSync(join(ROOT, 'test/artifacts'), { recursive: true });
const OUT = mkdtempSync(join(ROOT, 'test/artifacts/build-'));
t.teardown(() => rmSync(OUT, { recursive: true, force: true }));

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return p === join(ROOT, 'media/gst/build') ? [] : tsFiles(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}
const sources = SOURCE_DIRS.flatMap((d) => tsFiles(join(ROOT, d)));
const built = (source: string) => join(OUT, relative(ROOT, source)).replace(/\.ts$/, '.js');

/**
 * Paths a module reaches relative to its own file: `new URL('./…', import.meta.url)` (worker
 * entries, word lists; a template's fixed folder part), `.node` addons named by a relative path,
 * and `join(dirname(fileURLToPath(import.meta.url)), '..', …)` (the pages).
 */
function relativeReads(source: string): string[] {
  const text = readFileSync(source, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/new URL\(\s*['"`](\.{1,2}\/[^'"`$]*)/g)) out.push(m[1] as string);
  for (const m of text.matchAll(/['"](\.{1,2}\/[^'"]+\.node)['"]/g)) out.push(m[1] as string);
  for (const m of text.matchAll(/join\(dirname\(fileURLToPath\(import\.meta\.url\)\),((?:\s*'[^']*',?)+)\)/g)) {
    out.push([...(m[1] as string).matchAll(/'([^']*)'/g)].map((p) => p[1]).join('/'));
  }
  return out;
}

t.test('the build emits every server module as JavaScript importing .js files, with what the modules read beside them', { timeout: 300_000 }, async (t) => {
  const r = await run(process.execPath, [join(ROOT, 'bin/build.js'), '--out', OUT], { cwd: ROOT, env: { ...process.env, NODE_OPTIONS: '' } });
  t.match(r.stderr, /build: \d+ modules/, 'the script says what it built');
  t.ok(sources.length > 100, `${sources.length} sources`);
  // web/ is plain JavaScript served as is (copied whole); every other part is compiled.
  t.same(PARTS.filter((p) => p !== 'web' && !SOURCE_DIRS.includes(p)), [], 'the build covers every top-level part of the sources');
  const missing = sources.filter((s) => !existsSync(built(s)));
  t.same(missing.map((s) => relative(ROOT, s)), [], 'every source has its .js');
  const tsImports = sources.flatMap((s) => {
    const js = existsSync(built(s)) ? readFileSync(built(s), 'utf8') : '';
    return [...js.matchAll(/(?:from\s*|import\s*\(\s*)["'](\.{1,2}\/[^"']+\.ts)["']/g)].map((m) => `${relative(ROOT, s)}: ${m[1]}`);
  });
  t.same(tsImports, [], 'no built module imports a .ts file (Node 20 cannot load them without tsx)');
  const reads = sources.flatMap((s) => relativeReads(s).map((rel) => ({ from: s, rel, at: resolve(dirname(built(s)), rel.replace(/\.ts$/, '.js')) })));
  for (const want of ['./RenderWorker.ts', './EngineWorker.ts', './data/prompt-blocklist.txt', './build/Release/reverie_gst.node', '../../web']) {
    t.ok(
      reads.some((x) => x.rel === want),
      `the scan finds ${want}`,
    );
  }
  for (const x of reads) t.ok(existsSync(x.at), `${relative(ROOT, x.from)} → ${x.rel} resolves in the build (${relative(OUT, x.at)})`);
  t.equal(buildState(ROOT, OUT).current, true, 'and the build counts as current');
});

t.test('the built server starts without tsx: /readyz, its pages, and a song rendered on its render thread', { timeout: 240_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-built-'));
  const port = await freePort();
  // No --import tsx and NODE_OPTIONS cleared: Node 20 cannot load a .ts file, so any module or
  // worker that still reached for the sources would fail here.
  const child = spawn(process.execPath, [join(OUT, 'control/main.js'), 'serve'], {
    cwd: ROOT,
    env: { ...process.env, NODE_OPTIONS: '', PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'warn', RENDER_WORKERS: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  child.stderr.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
  });
  const url = `http://127.0.0.1:${port}`;
  const get = (path: string, headers: Record<string, string> = {}) => fetch(`${url}${path}`, { headers, signal: AbortSignal.timeout(15_000) }).catch(() => null);
  const ready = await until('/readyz of the built server', async () => (child.exitCode === null ? (await get('/readyz'))?.status : `exited: ${out}`), (s) => s === 200 || typeof s === 'string', 120_000, 200);
  t.equal(ready, 200, 'ready');
  const key = /API key \(shown once, keep it\): (\S+)/.exec(out)?.[1] ?? '';
  t.match(key, /^rv_/, 'the first-start key is printed');
  const page = await get('/web/songs.html');
  t.equal(page?.status, 200, 'the songs page is served from the build');
  t.match(await page?.text(), /<html/i);
  const auth = { authorization: `Bearer ${key}` };
  const created = await fetch(`${url}/music/v1/songs`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'warm lo-fi piano with soft drums', duration: 10, variations: 1 }),
    signal: AbortSignal.timeout(15_000),
  });
  t.equal(created.status, 202, 'song accepted (the artist filter read its word lists)');
  const { id } = (await created.json()) as { id: string };
  const song = await until(
    'the song to finish on the built render thread',
    async () => (await (await get(`/music/v1/songs/${id}`, auth))?.json()) as { status: string; error?: unknown; takes?: { mp3_url: string }[] } | undefined,
    (s) => s?.status === 'done' || s?.status === 'failed',
    120_000,
    250,
  );
  t.equal(song?.status, 'done', song?.status === 'done' ? 'rendered' : `rendered: ${JSON.stringify(song?.error)}\n${out.slice(-3000)}`);
  const mp3 = await fetch(song?.takes?.[0]?.mp3_url ?? `${url}/none`, { signal: AbortSignal.timeout(15_000) });
  const bytes = new Uint8Array(await mp3.arrayBuffer());
  t.equal(mp3.status, 200);
  t.ok(bytes.length > 10_000 && (String.fromCharCode(...bytes.slice(0, 3)) === 'ID3' || (bytes[0] === 0xff && ((bytes[1] ?? 0) & 0xe0) === 0xe0)), `an MP3 (${bytes.length} bytes)`);
  t.notMatch(out, /running the sources through tsx|ERR_MODULE_NOT_FOUND|ERR_UNKNOWN_FILE_EXTENSION/, 'nothing reached for the sources');
});

t.test('the engine thread starts from the build and runs a frame (its worker loads the compiled module)', { timeout: 120_000 }, async (t) => {
  const native = (await import(pathToFileURL(join(OUT, 'native/index.js')).href)) as typeof Native;
  const models = mkdtempSync(join(tmpdir(), 'rv-built-models-'));
  t.teardown(() => rmSync(models, { recursive: true, force: true }));
  native.buildTinyModel(models, 'demo/tiny');
  const W = 128;
  const pipeline = await native.createFramePipeline({
    modelsDir: models,
    params: { model_id: 'demo/tiny', width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [20] },
    logger: pino({ level: 'silent' }),
  });
  t.teardown(() => pipeline.close());
  const data = new Uint8Array(W * W * 3).map((_, i) => (i * 7) % 251);
  const frame = await pipeline.process({ width: W, height: W, data, ptsMs: 0 });
  t.equal(frame?.width, W, 'a frame came back from the engine thread');
  t.match(pipeline.status(), { modelId: 'demo/tiny', demo: true, lastError: null }, 'the diffusion pipeline itself, not the processors-only fallback');
});

t.test('a build is current until an input is newer; without sources (an image) the build stands', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'rv-fresh-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const out = join(root, 'dist');
  const at = (path: string, s: number) => utimesSync(join(root, path), s, s);
  for (const f of ['control/main.ts', 'songs/data/words.txt', 'web/index.html']) {
    mkdirSync(dirname(join(root, f)), { recursive: true });
    writeFileSync(join(root, f), 'x');
  }
  const T = 1_700_000_000; // s
  for (const p of ['control/main.ts', 'control', 'songs/data/words.txt', 'songs/data', 'songs', 'web/index.html', 'web']) at(p, T);
  t.same(buildState(root, out), { current: false, reason: 'missing' }, 'no build yet');
  mkdirSync(out);
  writeFileSync(join(out, '.build.json'), '{}');
  utimesSync(join(out, '.build.json'), T + 10, T + 10);
  t.same(buildState(root, out), { current: true, reason: 'current' }, 'built after every input');
  at('control/main.ts', T + 20);
  t.same(buildState(root, out), { current: false, reason: 'older than the sources' }, 'a source edited after the build');
  at('control/main.ts', T);
  at('web/index.html', T + 20);
  t.equal(buildState(root, out).current, false, 'a page edited after the build');
  at('web/index.html', T);
  t.equal(buildState(root, out).current, true, 'back to current');
  rmSync(join(root, 'songs/data/words.txt'));
  t.equal(buildState(root, out).current, false, 'a removed file (its folder changed)');
  for (const d of ['control', 'songs', 'web']) rmSync(join(root, d), { recursive: true });
  mkdirSync(join(root, 'bin'));
  writeFileSync(join(root, 'bin/build.js'), 'x');
  at('bin/build.js', T + 30);
  t.equal(buildState(root, out).current, true, 'an image with dist/ and bin/ but no sources runs its build whatever the copied files say');
});

t.test('a syntax error fails the build with TypeScript\'s message and leaves the previous build in place', { timeout: 180_000 }, async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'rv-broken-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const out = join(root, 'dist');
  // Our compiler options; no @types/node here (nothing to resolve it from) and none needed.
  writeFileSync(join(root, 'tsconfig.json'), JSON.stringify({ extends: join(ROOT, 'tsconfig.json'), compilerOptions: { types: [] }, files: [], include: [] }));
  writeFileSync(join(root, 'package.json'), '{ "type": "module" }'); // NodeNext emits ESM by it
  mkdirSync(join(root, 'control'));
  writeFileSync(join(root, 'control/main.ts'), "import { two } from './two.ts';\nexport const one: number = two - 1;\n");
  writeFileSync(join(root, 'control/two.ts'), 'export const two = 2;\n');
  const quiet = () => undefined;
  await build({ root, out, log: quiet });
  t.match(readFileSync(join(out, 'control/main.js'), 'utf8'), /from ['"]\.\/two\.js['"]/, 'the first build is there, importing .js');
  writeFileSync(join(root, 'control/two.ts'), 'export const two = ;\n');
  await t.rejects(build({ root, out, log: quiet }), /the build failed:[\s\S]*two\.ts/, 'the error names the file');
  t.match(readFileSync(join(out, 'control/two.js'), 'utf8'), /two = 2/, 'the previous build stays');
  t.same(readdirSync(root).filter((f) => f.startsWith('dist.')), [], 'no half-built folder left behind');
});
