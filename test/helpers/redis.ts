/**
 * A real redis-server for tests, on a free port, in its own temp dir.
 *
 *   const redis = await startRedis(t);                    // stopped on t's teardown
 *   const store = await RedisStore.open({ url: redis.url, prefix: `t${n}:` });
 *
 * Defaults: no RDB snapshots, no AOF (`--save '' --appendonly no`): nothing touches disk. Pass
 * `{ appendonly: true }` for durability tests (`appendfsync always` unless told otherwise), then
 * `stop({ signal: 'SIGKILL' })` + `restart()` to see what survived. Share one server between
 * tests with distinct key prefixes rather than starting many.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './net.ts';

export { freePort };

export interface RedisOptions {
  /** Turn the append-only file on (default false). */
  appendonly?: boolean;
  /** With `appendonly`: fsync policy; default `always` (every write on disk before the reply). */
  appendfsync?: 'always' | 'everysec' | 'no';
  /** Data directory; default a fresh temp dir, removed on the final stop. */
  dir?: string;
  /** How long to wait for PONG; default 10000 ms. */
  startTimeoutMs?: number;
}

export interface RedisServer {
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
  readonly port: number;
  /** Data directory (where the AOF goes). */
  readonly dir: string;
  /** pid of the current redis-server process. */
  readonly pid: number;
  /**
   * Stops the server and waits for it to exit. SIGTERM (default) shuts down cleanly; SIGKILL
   * simulates a crash. Idempotent. The temp dir stays until `teardown` (so `restart` can reuse it).
   */
  stop(opts?: { signal?: 'SIGTERM' | 'SIGKILL' }): Promise<void>;
  /** Starts a stopped server again on the same port and directory (stops it first if running). */
  restart(): Promise<void>;
  /** Stops the server and removes its temp dir. Registered on `t.teardown` when `t` is given. */
  teardown(): Promise<void>;
}

/** Minimal view of a tap test: only what the helper uses. */
interface Teardownable {
  teardown(fn: () => unknown): void;
}

/** Sends PING over a raw socket; resolves true on `+PONG`. */
function pingOnce(port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    let buffer = '';
    const finish = (ok: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      buffer += chunk.toString();
      if (buffer.includes('\r\n')) finish(buffer.startsWith('+PONG'));
    });
    socket.on('error', () => finish(false));
  });
}

export async function startRedis(t?: Teardownable, options: RedisOptions = {}): Promise<RedisServer> {
  const ownDir = options.dir === undefined;
  const dir = options.dir ?? mkdtempSync(path.join(os.tmpdir(), 'rv-redis-'));
  const startTimeoutMs = options.startTimeoutMs ?? 10_000;
  let port = 0;
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();

  const args = (): string[] => {
    const list = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--daemonize', 'no'];
    list.push('--appendonly', options.appendonly ? 'yes' : 'no');
    if (options.appendonly) list.push('--appendfsync', options.appendfsync ?? 'always');
    return list;
  };

  /** Spawns redis-server and resolves once it answers PING; rejects if it exits first. */
  const launch = async (): Promise<void> => {
    const proc = spawn('redis-server', args(), { stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    let output = '';
    const collect = (chunk: Buffer): void => {
      output = (output + chunk.toString()).slice(-4000);
    };
    proc.stdout?.on('data', collect);
    proc.stderr?.on('data', collect);
    exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    const died = exited.then(() => {
      throw new Error(`redis-server exited before it was ready [port:${port}]\n${output}`);
    });
    died.catch(() => undefined); // an exit after startup is reported by stop(), not here
    // redis-server prints this line once it accepts connections; then PING confirms.
    const ready = new Promise<void>((resolve) => {
      const onData = (): void => {
        if (output.includes('Ready to accept connections')) {
          proc.stdout?.off('data', onData);
          resolve();
        }
      };
      proc.stdout?.on('data', onData);
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`redis-server not ready in ${startTimeoutMs} ms [port:${port}]\n${output}`)), startTimeoutMs);
    });
    try {
      await Promise.race([ready, died, timeout]);
      if (!(await pingOnce(port, 2000))) throw new Error(`redis-server did not answer PING [port:${port}]\n${output}`);
    } catch (err) {
      proc.kill('SIGKILL');
      await exited;
      child = null;
      throw err;
    } finally {
      clearTimeout(timer);
    }
  };

  // Another process may take the port between freePort() and the bind: try a few ports.
  for (let attempt = 1; ; attempt++) {
    port = await freePort();
    try {
      await launch();
      break;
    } catch (err) {
      if (attempt >= 3) {
        if (ownDir) rmSync(dir, { recursive: true, force: true });
        throw err;
      }
    }
  }

  const stop = async (opts?: { signal?: 'SIGTERM' | 'SIGKILL' }): Promise<void> => {
    const proc = child;
    if (!proc) return;
    child = null;
    if (proc.exitCode === null && proc.signalCode === null) proc.kill(opts?.signal ?? 'SIGTERM');
    await exited;
  };

  let tornDown = false;
  const server: RedisServer = {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    get pid() {
      return child?.pid ?? -1;
    },
    stop,
    async restart() {
      await stop();
      await launch();
    },
    async teardown() {
      if (tornDown) return;
      tornDown = true;
      await stop();
      if (ownDir) rmSync(dir, { recursive: true, force: true });
    },
  };
  t?.teardown(() => server.teardown());
  return server;
}
