/**
 * One nginx process for a test: the `http { … }` body it is given wrapped in a single-process,
 * foreground configuration with its temp paths and logs in a fresh directory, started, ready once
 * `readyPath` answers `readyStatus`, killed (and its directory removed) on `t`'s teardown.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, send } from './net.ts';
import { until } from './until.ts';

const NGINX = '/usr/sbin/nginx';
export const haveNginx = existsSync(NGINX);

export interface NginxProcess {
  /** http://127.0.0.1:<port> it listens on. */
  url: string;
  /** Its directory (logs, temp paths). */
  dir: string;
  /** nginx's error log so far. */
  errors(): string;
}

export async function startNginx(
  t: { teardown(fn: () => unknown): void },
  opts: {
    /** Prefix of the temp directory's name. */
    name: string;
    /** The `http { … }` body for `port` (a free loopback port) and `dir`. */
    http: (port: number, dir: string) => string;
    workerConnections?: number;
    readyPath: string;
    readyStatus: number;
  },
): Promise<NginxProcess> {
  const dir = mkdtempSync(join(tmpdir(), `${opts.name}-`));
  const port = await freePort();
  const temp = (name: string) => `${name}_temp_path ${join(dir, name)};`;
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections ${opts.workerConnections ?? 512}; }
http {
  ${temp('client_body')} ${temp('proxy')} ${temp('fastcgi')} ${temp('uwsgi')} ${temp('scgi')}
${opts.http(port, dir)}
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
  const errors = () => (existsSync(join(dir, 'error.log')) ? readFileSync(join(dir, 'error.log'), 'utf8') : '');
  const url = `http://127.0.0.1:${port}`;
  await until(
    `nginx answers ${opts.readyPath}`,
    async () => {
      if (proc.exitCode !== null) throw new Error(`nginx exited ${proc.exitCode}: ${errors()}`);
      return (await send(url, { method: 'GET', path: opts.readyPath }).catch(() => ({ status: 0 }))).status;
    },
    (status) => status === opts.readyStatus,
    5000,
    50,
  );
  return { url, dir, errors };
}
