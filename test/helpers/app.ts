/**
 * Builds a real app on a real embedded store in a temp dir, with a key per plan on demand.
 * Closed on teardown. HTTP tests use `app.inject()` (fastify's in-process requests).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino, { type Logger } from 'pino';
import type { Test } from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { buildApp, type App } from '../../control/buildApp.ts';
import type { AppContext } from '../../control/Services.ts';
import { loadConfig, type Config, type ConfigEnv } from '../../control/config.ts';
import { LinkSigner } from '../../control/LinkSigner.ts';
import { Metrics } from '../../control/Metrics.ts';
import { createStore, FsBlobStore, type Plan, type Store } from '../../store/index.ts';

export interface TestApp {
  app: App;
  store: Store;
  config: Readonly<Config>;
  dataDir: string;
  ctx: AppContext;
  /** Creates an account on `plan` and returns its key. */
  key(plan?: Plan): Promise<string>;
}

export async function makeApp(
  t: Test,
  opts: { env?: Partial<ConfigEnv>; now?: () => number; logger?: Logger; services?: (base: { store: Store; dataDir: string; config: Readonly<Config> }) => Promise<Partial<AppContext>> | Partial<AppContext> } = {},
): Promise<TestApp> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-app-'));
  const config = loadConfig({}, { DATA_DIR: dataDir, LOG_LEVEL: 'silent', PORT: 0, ...opts.env });
  const store = await createStore({ dataDir, ...(opts.now ? { now: opts.now } : {}) });
  const logger = opts.logger ?? pino({ level: 'silent' });
  const extra = opts.services ? await opts.services({ store, dataDir, config }) : {};
  const ctx: AppContext = {
    store,
    logger,
    metrics: new Metrics({ defaultMetrics: false }),
    blobs: new FsBlobStore(join(dataDir, 'blobs')),
    links: LinkSigner.fromConfig(null, dataDir, opts.now),
    ...extra,
  };
  const app = await buildApp(config, ctx);
  t.teardown(async () => {
    await app.close();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  return {
    app,
    store,
    config,
    dataDir,
    ctx,
    key: async (plan: Plan = 'free') => (await createAccountWithKey(store, plan)).key,
  };
}
