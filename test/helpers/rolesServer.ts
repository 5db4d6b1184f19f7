/**
 * The embedded default's stream roles (media node, stream service, lifecycle supervisor) and the
 * app, built in this process so an end-to-end test can reach inside them (`roles.node`,
 * `roles.lifecycle`) and give the node its own processor factory. On a free loopback port with a
 * fresh DATA_DIR, no render workers, WebRTC on 127.0.0.1, an account with a key and `api()` for
 * JSON calls with it. Removed on `t`'s teardown. (For the server exactly as a user starts it, see
 * liveServer.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { buildApp } from '../../control/buildApp.ts';
import { loadConfig, type Config } from '../../control/config.ts';
import { Metrics } from '../../control/Metrics.ts';
import { startStreamRoles, type StreamRoleOverrides, type StreamRoles } from '../../control/StreamRoles.ts';
import type { FrameProcessorFactory } from '../../media/index.ts';
import { createStore, FsBlobStore, type Plan, type Store } from '../../store/index.ts';
import type { WebhookService } from '../../webhooks/index.ts';
import { PEER_PAGE } from '../media/harness.ts';
import { freePort } from './net.ts';

export type Json = Record<string, any>;

export interface RolesServerOptions {
  /** The account's plan. Default `internal` (no caps), as the embedded default's first key. */
  plan?: Plan;
  /** Runs once the config is loaded, before the roles start (e.g. to write a LoRA into its modelsDir). */
  prepare?: (config: Config) => void;
  /** The node's processor factory, made from the config. Default: the roles' own. */
  createProcessor?: (config: Config) => FrameProcessorFactory;
  /** More of startStreamRoles' overrides (the supervisor's clock, …). */
  overrides?: Omit<StreamRoleOverrides, 'iceAddresses' | 'createProcessor'>;
  /** Builds the webhooks the app serves, on the server's store; closed with the server, before the store. */
  webhooks?: (store: Store) => { service: WebhookService; close(): unknown };
  /** Serve the WebRTC test page (publish/play helpers, test/media/harness.ts) at `/peer.html`. */
  peerPage?: boolean;
  /** A Redis store instead of the embedded one: the api reaches the node over the bus, as in scale-out. */
  redisUrl?: string;
}

export interface RolesServer {
  base: string;
  key: string;
  config: Config;
  store: Store;
  roles: StreamRoles;
  /** A JSON call with the account's key. */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; headers: Headers; body: Json }>;
}

export async function startRolesServer(t: { teardown(fn: () => unknown): void }, opts: RolesServerOptions = {}): Promise<RolesServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-roles-'));
  const port = await freePort();
  const config = loadConfig({}, { DATA_DIR: dataDir, LOG_LEVEL: 'silent', PORT: port, HOST: '127.0.0.1', RENDER_WORKERS: 0 });
  opts.prepare?.(config);
  const logger = pino({ level: process.env['LOG_LEVEL'] ?? 'silent' });
  const store = await createStore({ dataDir, ...(opts.redisUrl ? { redisUrl: opts.redisUrl } : {}) });
  const metrics = new Metrics({ defaultMetrics: false });
  const webhooks = opts.webhooks?.(store);
  const roles = await startStreamRoles(config, { store, blobs: new FsBlobStore(join(dataDir, 'blobs')), logger, metrics }, {
    ...opts.overrides,
    iceAddresses: ['127.0.0.1'],
    ...(opts.createProcessor ? { createProcessor: opts.createProcessor(config) } : {}),
  });
  const app = await buildApp(config, { store, logger, metrics, ...(webhooks ? { webhooks: webhooks.service } : {}), ...roles.services });
  if (opts.peerPage) app.get('/peer.html', { config: { public: true }, schema: { hide: true } }, async (_req, reply) => reply.type('text/html').send(PEER_PAGE));
  // Torn down also when listen fails: a media node left running holds the test process open.
  t.teardown(async () => {
    await app.close();
    await roles.close();
    await webhooks?.close();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  await app.listen({ port, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${port}`;
  const { key } = await createAccountWithKey(store, opts.plan ?? 'internal');
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, headers: res.headers, body: (await res.json()) as Json };
  };
  return { base, key, config, store, roles, api };
}
