/**
 * A real nginx as the shared HLS cache docs/operations.md recommends: the reference configuration
 * is read from that document ("LL-HLS behind a shared cache", its nginx block) and started with
 * only its addresses and paths changed, so what the test measures is what operators are told to
 * run. Killed on `t`'s teardown.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startNginx } from './nginxProcess.ts';

export { haveNginx } from './nginxProcess.ts';
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
  const ref = referenceConfig();
  const nginx = await startNginx(t, {
    name: 'rv-hlscache',
    workerConnections: opts.workerConnections ?? 4096,
    http: (port, dir) => {
      const site = ref
        .replace('/var/cache/nginx/reverie-hls', join(dir, 'cache'))
        .replace('server 127.0.0.1:8080;', `server ${new URL(upstream).host};`)
        .replace('listen 80;', `listen 127.0.0.1:${port};`);
      if (site === ref || !site.includes(join(dir, 'cache')) || !site.includes(`listen 127.0.0.1:${port}`)) throw new Error('the reference nginx block changed shape');
      return `  log_format cache '$upstream_cache_status $status $request_uri';
  access_log ${join(dir, 'access.log')} cache;
${site}`;
    },
    // Ready when it answers /hls/ from the node (404 for an unknown playback id).
    readyPath: '/hls/nginx-ready/index.m3u8',
    readyStatus: 404,
  });
  const log = join(nginx.dir, 'access.log');
  return { url: nginx.url, errors: nginx.errors, log: () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter((l) => l !== '') : []) };
}
