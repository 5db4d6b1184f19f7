/**
 * The real server as a user runs it (`startServer`: embedded store, the roles asked for) on a
 * free loopback port with a fresh DATA_DIR, an account with a key, and `api()` for JSON calls
 * with that key. Stopped and removed on `t`'s teardown. For end-to-end tests and benchmarks.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino, { type Logger } from 'pino';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { loadConfig } from '../../control/config.ts';
import { startServer, type RunningServer } from '../../control/Server.ts';
import type { MediaSettings } from '../../media/index.ts';
import type { Plan } from '../../store/index.ts';
import { freePort } from './net.ts';

export type Json = Record<string, any>;

export interface LiveServer {
  server: RunningServer;
  url: string;
  dataDir: string;
  key: string;
  /** A JSON call with the account's key; redirects are answered, not followed. */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; headers: Headers; body: Json }>;
}

export async function startLiveServer(
  t: { teardown(fn: () => unknown): void },
  opts: { env?: Record<string, string | number>; plan?: Plan; mediaSettings?: Partial<MediaSettings>; /** Default: silent (or LOG_LEVEL). */ logger?: Logger } = {},
): Promise<LiveServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-live-'));
  const port = await freePort();
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: port, HOST: '127.0.0.1', PUBLIC_URL: `http://127.0.0.1:${port}`, LOG_LEVEL: 'silent', ...opts.env });
  const server = await startServer(config, { logger: opts.logger ?? pino({ level: process.env['LOG_LEVEL'] ?? 'silent' }), ...(opts.mediaSettings ? { mediaSettings: opts.mediaSettings } : {}) });
  t.teardown(async () => {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const { key } = await createAccountWithKey(server.store, opts.plan ?? 'pro');
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      redirect: 'manual',
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: (text ? JSON.parse(text) : null) as Json };
  };
  return { server, url: server.url, dataDir, key, api };
}
