/**
 * One `reverie serve` child process (the CLI entry, as operators run it) on the embedded store,
 * optionally inside a lab network namespace, configured only through its environment. Resolves
 * once it listens, with its first-start API key; killed on teardown.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Lab } from './netns.ts';

const ROOT = new URL('../..', import.meta.url).pathname;

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface ServerProcess {
  /** PUBLIC_URL. */
  url: string;
  /** The API key printed on first start. */
  key: string;
  child: ChildProcess;
  /** Recent output, for failure messages. */
  output(): string;
  /** JSON request against the API with the key. */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
}

export async function startServerProcess(
  t: Teardown,
  opts: {
    env: Record<string, string>;
    lab?: Lab;
    ns?: string;
    timeoutMs?: number;
    /** Extra node options before the entry (e.g. `--import` hooks). */
    nodeArgs?: string[];
    /** The checkout to run (default this one): a benchmark runs another commit's tree beside it. */
    root?: string;
    /**
     * A key made beforehand (a shared store prints none on start): the process counts as started
     * once it says it is running.
     */
    key?: string;
  },
): Promise<ServerProcess> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-server-'));
  const env = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: process.env['LOG_LEVEL'] ?? 'warn', ...opts.env };
  const root = opts.root ?? ROOT;
  const args = ['--import', 'tsx', ...(opts.nodeArgs ?? []), join(root, 'control/main.ts'), 'serve'];
  const child = opts.lab && opts.ns ? opts.lab.spawn(opts.ns, process.execPath, args, { env, cwd: root, stdio: ['ignore', 'pipe', 'pipe'] }) : spawn(process.execPath, args, { env, cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  // TEST_SERVER_LOG=<file>: every line the server writes is kept there too (with LOG_LEVEL=info,
  // the whole story of a failed run; the tail below is only what failure messages quote).
  const logFile = process.env['TEST_SERVER_LOG'];
  const keep = (d: Buffer) => {
    out = (out + d.toString()).slice(-20_000);
    if (logFile) appendFileSync(logFile, d);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
  });
  const key = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in time:\n${out}`)), opts.timeoutMs ?? 60_000);
    const check = () => {
      const m = /API key \(shown once, keep it\): (\S+)/.exec(out);
      const running = opts.key !== undefined && /Reverie is running/.test(out);
      if (m || running) {
        clearTimeout(timer);
        resolve(opts.key ?? (m?.[1] as string));
      }
    };
    child.stdout?.on('data', check);
    child.once('exit', (code) => reject(new Error(`server exited ${code} before listening:\n${out}`)));
  });
  const url = (opts.env['PUBLIC_URL'] ?? `http://127.0.0.1:${opts.env['PORT']}`).replace(/\/$/, '');
  return {
    url,
    key,
    child,
    output: () => out,
    async api(method, path, body) {
      const res = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(15_000),
      });
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON
      }
      return { status: res.status, body: parsed };
    },
  };
}
