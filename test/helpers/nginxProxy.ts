/**
 * A real nginx as the TLS proxy our docs recommend, minus the TLS: an HTTP reverse proxy on a free
 * loopback port in front of `upstream`, adding the client's address to X-Forwarded-For
 * (`$proxy_add_x_forwarded_for`), started with a temp config and killed on `t`'s teardown.
 * Clients with different addresses bind their socket to different loopback sources (127.0.0.2,
 * 127.0.0.3…: all of 127/8 is local on Linux), so nginx sees, and forwards, different peers.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, send } from './net.ts';
import { until } from './until.ts';

const NGINX = '/usr/sbin/nginx';
export const haveNginx = existsSync(NGINX);

export interface NginxProxy {
  /** http://127.0.0.1:<port> of the proxy. */
  url: string;
}

/** Starts nginx proxying every path to `upstream` (http://host:port) the way docs/operations.md shows. */
export async function startNginxProxy(t: { teardown(fn: () => unknown): void }, upstream: string): Promise<NginxProxy> {
  const dir = mkdtempSync(join(tmpdir(), 'rv-proxy-'));
  const port = await freePort();
  const temp = (name: string) => `${name}_temp_path ${join(dir, name)};`;
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 512; }
http {
  access_log off;
  ${temp('client_body')} ${temp('proxy')} ${temp('fastcgi')} ${temp('uwsgi')} ${temp('scgi')}
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass ${upstream};
      proxy_http_version 1.1;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
    }
  }
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
  // Ready when it proxies: any HTTP answer from the upstream through it.
  await until(
    'nginx proxies',
    async () => {
      if (proc.exitCode !== null) throw new Error(`nginx exited ${proc.exitCode}: ${readFileSync(join(dir, 'error.log'), 'utf8')}`);
      return (await send(url, { method: 'GET', path: '/livez' }).catch(() => ({ status: 0 }))).status;
    },
    (status) => status === 200,
    5000,
    50,
  );
  return { url };
}
