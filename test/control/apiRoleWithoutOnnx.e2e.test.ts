/**
 * An api-only process never loads ONNX Runtime: the API validates stream params with native's
 * params module, and only a media node that builds a pipeline loads the engine. The child
 * processes run with a hook (fixtures/refuseOnnxRuntime.mjs) that makes any load of
 * onnxruntime-node throw; a control run shows the hook does catch the engine's entry.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { RedisStore } from '../../store/index.ts';
import { freePort, startRedis } from '../helpers/redis.ts';
import { startServerProcess } from '../helpers/serverProcess.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const HOOK = fileURLToPath(new URL('./fixtures/refuseOnnxRuntime.mjs', import.meta.url));
const IMPORT = fileURLToPath(new URL('./fixtures/importModule.ts', import.meta.url));

/** Runs `node --import tsx --import HOOK importModule.ts <module>`; resolves with its exit code and output. */
function importUnderHook(module: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--import', HOOK, IMPORT, module], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

t.test('the hook refuses onnxruntime-node: importing the engine entry fails under it', { timeout: 90_000 }, async (t) => {
  const r = await importUnderHook('native/index.ts');
  t.not(r.code, 0, 'the import fails');
  t.match(r.out, /REFUSED onnxruntime-node/, 'because onnxruntime-node was refused');
});

t.test('the params module, the stream service and the control app load without onnxruntime-node', { timeout: 90_000 }, async (t) => {
  for (const m of ['native/params/index.ts', 'streams/StreamService.ts', 'control/buildApp.ts', 'control/Roles.ts', 'media/index.ts']) {
    const r = await importUnderHook(m);
    t.equal(r.code, 0, `${m} imports (${r.out.trim().slice(-300)})`);
  }
});

t.test('`reverie serve --roles api` serves and validates stream params without onnxruntime-node', { timeout: 120_000 }, async (t) => {
  const redis = await startRedis(t);
  const port = await freePort();
  const store = await RedisStore.open({ url: redis.url, prefix: 'rv:' });
  const { key } = await createAccountWithKey(store, 'internal');
  await store.close();
  const srv = await startServerProcess(t, {
    env: { REDIS_URL: redis.url, ROLES: 'api', PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn' },
    nodeArgs: ['--import', HOOK],
    key,
  });
  const list = await srv.api('GET', '/v1/streams');
  t.equal(list.status, 200, 'GET /v1/streams → 200');
  const bad = await srv.api('POST', '/v1/streams', { params: { model_id: 'stabilityai/sd-turbo', num_inference_steps: 10, t_index_list: [20] } });
  t.equal(bad.status, 400, 'params the cross-field rules refuse → 400');
  t.equal(bad.body?.details?.issues?.[0]?.field, 'params.t_index_list[0]', 'naming the field');
  t.equal(srv.child.exitCode, null, 'the process is still running');
  t.notMatch(srv.output(), /REFUSED onnxruntime-node/, 'and never tried to load onnxruntime-node');
});
