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
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers, type ObsPublishers } from '../helpers/obsPublisher.ts';
import { freePort, startRedis, type RedisServer } from '../helpers/redis.ts';
import { makeTls, TestReceiver, type TestTls } from '../webhooks/helpers.ts';

const ROOT = new URL('../..', import.meta.url).pathname;
const CLI = ['--import', 'tsx', join(ROOT, 'control/main.ts'), 'serve'];

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
  #pubs: ObsPublishers | null = null;

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
        // Loopback only: addresses other tests add and remove (network labs) must not carry our media.
        WEBRTC_INTERFACES: '127.0.0.1',
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

  /**
   * Publishes a synthetic H.264 camera over WHIP to `url` (libdatachannel, as OBS, in one child
   * process for the cluster). Its media stays on 127.0.0.1, as the media nodes' ICE does
   * (WEBRTC_INTERFACES): a publisher that gathered on every interface could pair over an address
   * another test adds and then removes (the network lab's veth), and lose its session mid-test.
   */
  async publish(url: string, streamKey: string): Promise<Publisher> {
    this.#pubs ??= startObsPublishers(this.t);
    const pubs = this.#pubs;
    const p = await pubs.publish({ url, token: streamKey, source: await stampedH264({ size: 256, frames: 300 }), bindAddress: '127.0.0.1' });
    return { status: p.status, location: p.location, stop: () => void pubs.vanish(p.id).catch(() => undefined) };
  }

  /**
   * A receive-only WHEP viewer of `url` (libdatachannel, as the publishers; H.264 and Opus, no
   * decoding) whose HTTP request leaves from `httpFrom` (a loopback address of its own).
   */
  async play(url: string, httpFrom?: string): Promise<{ id: string; status: number; location: string | null; body: string; packets(): Promise<number>; connected(timeoutMs: number): Promise<void>; stop(): void }> {
    this.#pubs ??= startObsPublishers(this.t);
    const pubs = this.#pubs;
    const v = await pubs.play({ url, ...(httpFrom ? { httpFrom } : {}) });
    return {
      ...v,
      packets: async () => (await pubs.stats(v.id)).packetsReceived ?? 0,
      connected: (timeoutMs) => pubs.waitState(v.id, 'connected', timeoutMs),
      stop: () => void pubs.vanish(v.id).catch(() => undefined),
    };
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
 * A process's last 4 000 characters of log with the noise folded: during a Redis outage every
 * client logs a connection error per retry and every loop a failure per tick, which would push
 * out the lines that tell what went wrong. A run of lines with the same message becomes its first
 * line and a count; stacks are left out.
 */
function tail(output: string): string {
  const msgOf = (l: string) => /"msg":"((?:[^"\\]|\\.)*)"/.exec(l)?.[1] ?? l;
  const out: string[] = [];
  let last = '';
  let repeats = 0;
  for (const line of output.split('\n')) {
    if (line.trim() === '') continue;
    const msg = msgOf(line);
    if (msg === last) {
      repeats++;
      continue;
    }
    if (repeats > 0) out.push(`  (× ${repeats} more)`);
    repeats = 0;
    last = msg;
    out.push(line.replace(/"stack":"(?:[^"\\]|\\.)*",?/g, ''));
  }
  if (repeats > 0) out.push(`  (× ${repeats} more)`);
  return out.join('\n').slice(-4_000);
}
