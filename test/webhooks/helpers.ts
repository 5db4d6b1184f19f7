/**
 * Test fixtures for webhooks: a throwaway CA and server certificate made with the `openssl` CLI,
 * and a real HTTPS receiver on loopback that records every request and answers as told.
 */
import { execFileSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import type { Logger } from 'pino';
import { EmbeddedStore } from '../../store/index.ts';
import type { Store } from '../../store/index.ts';
import { createWebhooks } from '../../webhooks/index.ts';
import type { DeliveryEngineOptions, Webhooks, WebhooksOptions } from '../../webhooks/index.ts';

export interface TestTls {
  ca: string;
  key: string;
  cert: string;
  dir: string;
  cleanup(): void;
}

/** Names and addresses the server certificate is valid for. */
export const CERT_NAMES = ['localhost', 'receiver.test', 'hooks.example.com', 'rebind.example.com'];

/** A CA and a server certificate signed by it (EC P-256, valid 2 days), in a temp dir. */
export function makeTls(): TestTls {
  const dir = mkdtempSync(join(tmpdir(), 'reverie-wh-tls-'));
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=Reverie Test CA');
  run('req', ...ec, '-keyout', 'srv.key', '-out', 'srv.csr', '-subj', '/CN=localhost');
  const san = [...CERT_NAMES.map((n) => `DNS:${n}`), 'IP:127.0.0.1', 'IP:::1'].join(',');
  writeFileSync(join(dir, 'ext.cnf'), `basicConstraints=CA:FALSE\nsubjectAltName=${san}\n`);
  run('x509', '-req', '-in', 'srv.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'srv.crt', '-days', '2', '-extfile', 'ext.cnf');
  return {
    dir,
    ca: readFileSync(join(dir, 'ca.crt'), 'utf8'),
    key: readFileSync(join(dir, 'srv.key'), 'utf8'),
    cert: readFileSync(join(dir, 'srv.crt'), 'utf8'),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  atMs: number;
}

/** What the receiver answers: a status (+ body/headers), or `hang` (never answer). */
export type Reply = { status: number; body?: string; headers?: Record<string, string>; delayMs?: number } | 'hang';

export class TestReceiver {
  readonly requests: ReceivedRequest[] = [];
  /** Decides each answer; default 200 "ok". */
  reply: (req: ReceivedRequest) => Reply = () => ({ status: 200, body: 'ok' });
  #waiters: { n: number; resolve: () => void }[] = [];

  private constructor(
    readonly server: https.Server,
    readonly port: number,
  ) {}

  static async start(tls: TestTls, host = '127.0.0.1'): Promise<TestReceiver> {
    let self: TestReceiver | null = null;
    const server = https.createServer({ key: tls.key, cert: tls.cert }, (req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => self?.handle(req, Buffer.concat(chunks).toString('utf8'), res));
    });
    await new Promise<void>((resolve) => server.listen(0, host, resolve));
    self = new TestReceiver(server, (server.address() as AddressInfo).port);
    return self;
  }

  url(path = '/hook', host = '127.0.0.1'): string {
    const h = host.includes(':') ? `[${host}]` : host;
    return `https://${h}:${this.port}${path}`;
  }

  private handle(req: IncomingMessage, body: string, res: ServerResponse): void {
    const rec: ReceivedRequest = {
      method: req.method ?? '',
      path: req.url ?? '',
      headers: req.headers,
      body,
      atMs: Date.now(),
    };
    this.requests.push(rec);
    const reply = this.reply(rec);
    if (reply !== 'hang') {
      const send = () => {
        if (res.destroyed) return;
        res.writeHead(reply.status, reply.headers);
        res.end(reply.body ?? '');
      };
      if (reply.delayMs !== undefined) setTimeout(send, reply.delayMs);
      else send();
    }
    const n = this.requests.length;
    this.#waiters = this.#waiters.filter((w) => {
      if (n >= w.n) w.resolve();
      return n < w.n;
    });
  }

  /** Resolves once `n` requests in total have arrived (no polling). */
  waitForCount(n: number): Promise<void> {
    if (this.requests.length >= n) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ n, resolve }));
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A silent logger (set WH_TEST_LOG=debug to see it). */
export function testLogger(): Logger {
  return pino({ level: process.env.WH_TEST_LOG ?? 'silent' });
}

/** A clock tests move by hand. */
export class ManualClock {
  constructor(public ms = Date.parse('2026-03-01T12:00:00.000Z')) {}
  readonly now = (): number => this.ms;
  advance(ms: number): void {
    this.ms += ms;
  }
}

/** An EmbeddedStore in a fresh temp dir, closed and removed at teardown. */
export function openStore(t: { teardown: (fn: () => unknown) => void }, now?: () => number): { store: EmbeddedStore; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'reverie-wh-store-'));
  const store = EmbeddedStore.open({ dataDir: dir, ...(now ? { now } : {}) });
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { store, dir };
}

/**
 * Resolves when `cond()` holds, checking every 5 ms (state changes in another component with no
 * event to wait on); rejects after `timeoutMs` with `what`.
 */
export async function waitUntil(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export interface WebhooksSetup {
  store: Store;
  clock: ManualClock;
  tls: TestTls;
  /** Engine options over the tests' defaults (10 ms idle wait, jitter at the schedule's middle). */
  engine?: Omit<DeliveryEngineOptions, 'store' | 'client' | 'logger' | 'now'>;
  service?: WebhooksOptions['service'];
}

/**
 * A started webhook worker over `store` on the test clock (loopback allowed, the test CA trusted)
 * and a fresh HTTPS receiver; both closed at teardown.
 */
export async function startWebhooks(t: { teardown: (fn: () => unknown) => void }, o: WebhooksSetup): Promise<{ receiver: TestReceiver; wh: Webhooks }> {
  const receiver = await TestReceiver.start(o.tls);
  const wh = createWebhooks({
    store: o.store,
    logger: testLogger(),
    now: o.clock.now,
    allowLoopback: true,
    ca: o.tls.ca,
    // random() = 0.5 puts every wait exactly on the schedule: no jitter draw surprises.
    engine: { idleWaitMs: 10, random: () => 0.5, ...o.engine },
    ...(o.service ? { service: o.service } : {}),
  });
  t.teardown(async () => {
    await wh.close();
    await receiver.close();
  });
  await wh.engine.start();
  return { receiver, wh };
}

/** The ended stream the tests' events are about. */
export const TEST_STREAM = {
  id: 'str_1',
  pipeline: 'streamdiffusion' as const,
  createdAt: '2026-03-01T11:00:00.000Z',
  startedAt: '2026-03-01T11:01:00.000Z',
  endedAt: '2026-03-01T11:31:00.000Z',
  endReason: 'deleted' as const,
  gatewayHost: 'gw.example.com',
};

/** A webhook worker in its own process (fixtures/engineChild.ts), resolved once it prints `ready`; `env` configures it. */
export function startEngineChild(env: Record<string, string>, onLine?: (line: string) => void): Promise<ChildProcess> {
  const child = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'engineChild.ts');
  const proc = spawn(process.execPath, ['--import', 'tsx', child], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`engine exited before ready (${code})`)));
    // Every line the child prints (slot traces come from its first lease on, right after `ready`).
    createInterface({ input: proc.stdout as Readable }).on('line', (line) => {
      if (line === 'ready') resolve(proc);
      else onLine?.(line);
    });
  });
}

/** SIGKILLs a child (a crash, mid-delivery) and waits for its exit; nothing when it already ended. */
export async function killChild(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGKILL');
  await exited;
}
