/**
 * A scale-out deployment on loopback for the e2e tests: real `reverie serve --roles …` child
 * processes (the CLI entry, as operators run it) sharing one real redis-server, one DATA_DIR (the
 * shared blob directory of docs/operations.md) and one link-signing secret; a real HTTPS webhook
 * receiver; real WebRTC publishers (@roamhq/wrtc in child processes, test/media/fixtures).
 *
 *   const c = await Cluster.start(t, { appendonly: true });
 *   const api1 = await c.spawn('api1', 'api');
 *   …
 *   await c.kill(api1, 'SIGKILL');
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { RedisStore } from '../../store/index.ts';
import { freePort, startRedis, type RedisServer } from '../helpers/redis.ts';
import { makeTls, TestReceiver, type TestTls } from '../webhooks/helpers.ts';

const ROOT = new URL('../..', import.meta.url).pathname;
const CLI = ['--import', 'tsx', join(ROOT, 'control/main.ts'), 'serve'];
const PUBLISHER = join(ROOT, 'test/media/fixtures/wrtcPublisher.ts');

export type Json = Record<string, any>;

export interface Proc {
  name: string;
  roles: string;
  port: number;
  url: string;
  child: ChildProcess;
  /** Resolves when the process has exited. */
  exited: Promise<void>;
  /** Recent output (stdout + stderr), for failure messages. */
  output(): string;
}

export interface Publisher {
  status: number;
  location: string | null;
  /** Kills the publisher (the connection vanishes, as when OBS is closed). */
  stop(): void;
}

export class Cluster {
  readonly procs = new Set<Proc>();
  key = '';

  private constructor(
    readonly t: Test,
    readonly redis: RedisServer,
    readonly dataDir: string,
    readonly tls: TestTls,
    readonly receiver: TestReceiver,
    /** The test's own view of the shared state (same Redis, same prefix as the processes). */
    readonly store: RedisStore,
  ) {}

  static async start(t: Test, opts: { appendonly?: boolean } = {}): Promise<Cluster> {
    const redis = await startRedis(t, { appendonly: opts.appendonly ?? false });
    const dataDir = mkdtempSync(join(tmpdir(), 'rv-scaleout-'));
    const tls = makeTls();
    writeFileSync(join(tls.dir, 'ca.pem'), tls.ca);
    const receiver = await TestReceiver.start(tls);
    const store = await RedisStore.open({ url: redis.url });
    const c = new Cluster(t, redis, dataDir, tls, receiver, store);
    t.teardown(async () => {
      await Promise.all([...c.procs].map((p) => c.kill(p, 'SIGKILL')));
      await store.close().catch(() => undefined);
      await receiver.close();
      tls.cleanup();
      rmSync(dataDir, { recursive: true, force: true });
    });
    c.key = (await createAccountWithKey(store, 'pro')).key;
    return c;
  }

  /** Starts `reverie serve --roles <roles>` and resolves once it printed its banner. */
  async spawn(name: string, roles: string, env: Record<string, string> = {}): Promise<Proc> {
    const port = await freePort();
    const modelsDir = join(this.dataDir, 'models');
    mkdirSync(modelsDir, { recursive: true });
    const child = spawn(process.execPath, [...CLI, '--roles', roles, '--port', String(port)], {
      env: {
        ...process.env,
        REDIS_URL: this.redis.url,
        DATA_DIR: this.dataDir,
        MODELS_DIR: modelsDir,
        // The test cluster has no real exports: ask for demo models (off by default with MODELS_DIR).
        DEMO_MODELS: '1',
        LOG_LEVEL: process.env['SCALEOUT_LOG'] ?? 'warn',
        RENDER_WORKERS: '1',
        ALLOW_LOOPBACK_TARGETS: '1',
        EXTRA_CA_FILE: join(this.tls.dir, 'ca.pem'),
        LINK_SIGNING_SECRET: 'scaleout-test-secret-0123456789abcdef',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const collect = (d: Buffer) => {
      out = (out + d.toString()).slice(-20_000);
      if (process.env['SCALEOUT_LOG']) process.stderr.write(`[${name}] ${d.toString()}`);
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    const exited = once(child, 'exit').then(() => undefined);
    const proc: Proc = { name, roles, port, url: `http://127.0.0.1:${port}`, child, exited, output: () => out };
    this.procs.add(proc);
    await new Promise<void>((resolve, reject) => {
      const onData = () => {
        if (out.includes('Reverie is running')) {
          child.stdout?.off('data', onData);
          resolve();
        }
      };
      child.stdout?.on('data', onData);
      void exited.then(() => reject(new Error(`${name} exited before it was ready:\n${out}`)));
    });
    return proc;
  }

  /** Kills a process (SIGKILL: a crash; SIGTERM: a graceful stop) and waits for it to exit. */
  async kill(p: Proc, signal: 'SIGKILL' | 'SIGTERM'): Promise<void> {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill(signal);
    await p.exited;
    this.procs.delete(p);
  }

  /** An API call with the account's key. */
  async api(p: Proc, method: string, path: string, body?: unknown): Promise<{ status: number; headers: Headers; body: Json }> {
    const res = await fetch(`${p.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as Json) : {} };
  }

  /** Publishes a synthetic camera over WHIP to `url` from a child process. */
  async publish(url: string, streamKey: string): Promise<Publisher> {
    const child = spawn(process.execPath, ['--import', 'tsx', PUBLISHER, url, streamKey, '200,60,60'], { stdio: ['pipe', 'pipe', 'pipe'] });
    const exited = once(child, 'exit');
    this.t.teardown(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    let out = '';
    const line = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const nl = out.indexOf('\n');
        if (nl >= 0) resolve(out.slice(0, nl));
      });
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      void exited.then(() => reject(new Error(`publisher exited: ${out}`)));
    });
    const r = JSON.parse(line) as { status: number; location: string | null };
    return { ...r, stop: () => child.kill('SIGKILL') };
  }

  /** Polls `check` (a real read of the system) until it returns a value, or fails after `timeoutMs`. */
  async until<T>(what: string, check: () => Promise<T | null | undefined | false>, timeoutMs = 30_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = await check();
      if (v) return v;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${this.#tails()}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** The last lines each process printed (warnings and errors at the default level): what a timeout message needs. */
  #tails(): string {
    return [...this.procs].map((p) => `--- ${p.name} (${p.roles}):\n${tail(p.output())}`).join('\n');
  }

  /** Webhook events received so far (parsed bodies with the delivery id header). */
  events(): { id: string; headerId: string; type: string; data: Json }[] {
    return this.receiver.requests.map((r) => {
      const body = JSON.parse(r.body) as Json;
      return { id: body['id'] as string, headerId: String(r.headers['reverie-webhook-id']), type: body['type'] as string, data: body['data'] as Json };
    });
  }
}

/**
 * A process's last 2 500 characters of log without the reconnect noise: during a Redis outage
 * every client logs a connection error per retry, which would push out the lines that tell
 * what went wrong. Those become one count.
 */
function tail(output: string): string {
  const lines = output.split('\n');
  const noise = lines.filter((l) => l.includes('redis | connection error')).length;
  const kept = lines
    .filter((l) => !l.includes('redis | connection error'))
    .map((l) => l.replace(/"stack":"(?:[^"\\]|\\.)*",?/g, ''))
    .join('\n')
    .slice(-2_500);
  return `${noise > 0 ? `(${noise} "redis | connection error" lines left out)\n` : ''}${kept}`;
}
