/**
 * A real nginx as the shared HLS cache docs/operations.md recommends: the reference configuration
 * is read from that document ("LL-HLS behind a shared cache", its nginx block) and started with
 * only its addresses and paths changed, so what the test measures is what operators are told to
 * run. Killed on `t`'s teardown.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, send } from './net.ts';
import { until } from './until.ts';

const NGINX = '/usr/sbin/nginx';
export const haveNginx = existsSync(NGINX);
const DOC = new URL('../../docs/operations.md', import.meta.url);

/** The nginx block of docs/operations.md's "LL-HLS behind a shared cache". */
export function referenceConfig(): string {
  const doc = readFileSync(DOC, 'utf8');
  const section = doc.slice(doc.indexOf('### LL-HLS behind a shared cache'));
  const block = /```nginx\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error('docs/operations.md has no nginx block under "LL-HLS behind a shared cache"');
  return block;
}

export interface NginxCache {
  /** http://127.0.0.1:<port> of the cache. */
  url: string;
  /** The access log's lines so far: `<upstream_cache_status> <status> <request_uri>`. */
  log(): string[];
  /** nginx's error log so far. */
  errors(): string;
}

/** Starts the reference cache in front of `upstream` (http://127.0.0.1:port). */
export async function startNginxCache(t: { teardown(fn: () => unknown): void }, upstream: string, opts: { workerConnections?: number } = {}): Promise<NginxCache> {
  const dir = mkdtempSync(join(tmpdir(), 'rv-hlscache-'));
  const port = await freePort();
  const temp = (name: string) => `${name}_temp_path ${join(dir, name)};`;
  const ref = referenceConfig();
  const site = ref
    .replace('/var/cache/nginx/reverie-hls', join(dir, 'cache'))
    .replace('server 127.0.0.1:8080;', `server ${new URL(upstream).host};`)
    .replace('listen 80;', `listen 127.0.0.1:${port};`);
  if (site === ref || !site.includes(join(dir, 'cache')) || !site.includes(`listen 127.0.0.1:${port}`)) throw new Error('the reference nginx block changed shape');
  const log = join(dir, 'access.log');
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections ${opts.workerConnections ?? 4096}; }
http {
  ${temp('client_body')} ${temp('proxy')} ${temp('fastcgi')} ${temp('uwsgi')} ${temp('scgi')}
  log_format cache '$upstream_cache_status $status $request_uri';
  access_log ${log} cache;
${site}
}
`,
  );
  const proc: ChildProcess = spawn(NGINX, ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
  const exited = new Promise((r) => proc.once('exit', r));
  t.teardown(async () => {
    if (proc.exitCode === null) {
      proc.kill('SIGKILL');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  });
  const url = `http://127.0.0.1:${port}`;
  // Ready when it answers /hls/ from the node (404 for an unknown playback id) .
  await until(
    'nginx cache answers',
    async () => {
      if (proc.exitCode !== null) throw new Error(`nginx exited ${proc.exitCode}: ${readFileSync(join(dir, 'error.log'), 'utf8')}`);
      return (await send(url, { method: 'GET', path: '/hls/nginx-ready/index.m3u8' }).catch(() => ({ status: 0 }))).status;
    },
    (status) => status === 404,
    5000,
    50,
  );
  const errors = () => readFileSync(join(dir, 'error.log'), 'utf8');
  return { url, errors, log: () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter((l) => l !== '') : []) };
}
