/**
 * A real RTMP server for tests: nginx with libnginx-mod-rtmp (Debian packages `nginx-light` +
 * `libnginx-mod-rtmp`), started on a free port with a temp config that records everything
 * (`record all`) and tells the test over HTTP when a publisher connects (`on_publish`) and when a
 * recording is complete (`on_record_done`, i.e. the publisher left), so tests wait on events,
 * not sleeps.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

interface Teardown {
  teardown(fn: () => unknown): void;
}

const NGINX = '/usr/sbin/nginx';
const RTMP_MODULE = '/usr/lib/nginx/modules/ngx_rtmp_module.so';
export const haveNginx = existsSync(NGINX) && existsSync(RTMP_MODULE);

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createNetServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** Events nginx reports through its HTTP notify callbacks. */
export class Notifications {
  readonly server: Server;
  /** `app` and `name`: the RTMP application and stream name nginx saw (on_publish's form fields). */
  readonly events: { kind: 'publish' | 'record_done'; path?: string; app?: string; name?: string }[] = [];
  #waiters: (() => void)[] = [];
  constructor() {
    this.server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const q = new URLSearchParams(body);
        this.events.push({ kind: req.url === '/done' ? 'record_done' : 'publish', path: q.get('path') ?? undefined, app: q.get('app') ?? undefined, name: q.get('name') ?? undefined });
        for (const w of this.#waiters.splice(0)) w();
        res.writeHead(200).end();
      });
    });
  }
  /** Resolves once `count` events of `kind` have arrived. */
  async waitFor(kind: 'publish' | 'record_done', count: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.events.filter((e) => e.kind === kind).length < count) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${count} × ${kind}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }
}

export interface RtmpServer {
  port: number;
  dir: string;
  notes: Notifications;
  start(): Promise<void>;
  /** SIGKILL, as a crashed server. */
  kill(): Promise<void>;
}

export async function startNginx(t: Teardown): Promise<RtmpServer> {
  const dir = mkdtempSync(join(tmpdir(), 'rv-rtmp-'));
  mkdirSync(join(dir, 'rec'));
  const notes = new Notifications();
  await new Promise<void>((r) => notes.server.listen(0, '127.0.0.1', r));
  const cbPort = (notes.server.address() as { port: number }).port;
  const port = await freePort();
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log info;
load_module ${RTMP_MODULE};
events { worker_connections 64; }
rtmp {
  server {
    listen 127.0.0.1:${port};
    application live {
      live on;
      record all;
      record_path ${dir}/rec;
      record_unique on;
      on_publish http://127.0.0.1:${cbPort}/publish;
      on_record_done http://127.0.0.1:${cbPort}/done;
    }
  }
}
`,
  );
  let proc: ChildProcess | null = null;
  const srv: RtmpServer = {
    port,
    dir,
    notes,
    async start() {
      const p = spawn(NGINX, ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
      proc = p;
      // Ready when the port accepts connections.
      const deadline = Date.now() + 5000;
      for (;;) {
        const ok = await new Promise<boolean>((resolve) => {
          const s = createNetServer();
          s.once('error', () => resolve(true)); // EADDRINUSE: nginx is listening
          s.listen(port, '127.0.0.1', () => s.close(() => resolve(false)));
        });
        if (ok) return;
        if (p.exitCode !== null || Date.now() > deadline) throw new Error('nginx did not start');
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async kill() {
      const p = proc;
      if (!p || p.exitCode !== null) return;
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      await exited;
    },
  };
  t.teardown(async () => {
    await srv.kill();
    notes.server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  await srv.start();
  return srv;
}

