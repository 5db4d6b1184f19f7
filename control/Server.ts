/**
 * The server entry: builds the parts a process's roles need around one store, starts them, and
 * shuts them down in order on SIGINT/SIGTERM — listeners, then streams, then queues, then stores.
 * (buildApp stays free of all this so tests can build apps alone.)
 */
import { join } from 'node:path';
import pino, { type Logger } from 'pino';
import type { MediaSettings } from '../media/index.ts';
import { createStore, FsBlobStore, type Store } from '../store/index.ts';
import { createAccountWithKey } from './ApiKeys.ts';
import { buildApp, type App } from './buildApp.ts';
import type { Config } from './config.ts';
import { LinkSigner } from './LinkSigner.ts';
import { Metrics } from './Metrics.ts';
import { startRoles, type RoleHandles } from './Roles.ts';
import { webRoutes } from './routes/web.ts';

export interface RunningServer {
  app: App;
  store: Store;
  url: string;
  /** The key printed on the embedded default's first start, if one was made now. */
  firstKey: string | null;
  close(): Promise<void>;
}

export function createLogger(config: Pick<Config, 'logLevel'>): Logger {
  return pino({
    name: 'reverie',
    level: config.logLevel,
    redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.secret', '*.stream_key'], censor: '[redacted]' },
  });
}

export async function startServer(config: Readonly<Config>, opts: { logger?: Logger; now?: () => number; mediaSettings?: Partial<MediaSettings> } = {}): Promise<RunningServer> {
  const logger = opts.logger ?? createLogger(config);
  const log = logger.child({ module: 'Server' });
  let ready = false;

  const store = await createStore({
    dataDir: config.dataDir,
    ...(config.redisUrl ? { redisUrl: config.redisUrl, redisPrefix: config.redisPrefix } : {}),
    ...(opts.now ? { now: opts.now } : {}),
    logger: logger.child({ module: 'Store' }),
  });
  const metrics = new Metrics();
  const blobs = new FsBlobStore(join(config.dataDir, 'blobs'));
  const links = LinkSigner.fromConfig(config.linkSigningSecret, config.dataDir, opts.now);

  if (config.allowLoopbackTargets) {
    log.warn('startServer() | ALLOW_LOOPBACK_TARGETS is on: webhooks and style images may reach loopback. Never run production like this.');
  }
  // Said once at start: a proxy missing here makes every client behind it one address to the limits.
  if (config.trustedProxies.length > 0) log.info(`startServer() | X-Forwarded-For believed from TRUSTED_PROXIES [proxies:${config.trustedProxies.join(',')}]`);

  let firstKey: string | null = null;
  if (store.kind === 'embedded' && (await store.accounts.count()) === 0) {
    // The embedded default is for one operator: hand them a working key right away. It is the
    // machine's owner, so no plan caps it (live streams at once, monthly allowances): `internal`.
    const created = await createAccountWithKey(store, 'internal', 'owner');
    firstKey = created.key;
  }

  let roles: RoleHandles | null = null;
  let app: App | null = null;
  try {
    roles = await startRoles(config, { store, blobs, logger, metrics, forwardedSecret: links.derive('media-forwarded'), links, ...(opts.now ? { now: opts.now } : {}), ...(opts.mediaSettings ? { mediaSettings: opts.mediaSettings } : {}) });
    app = await buildApp(config, { store, logger, metrics, blobs, links, isReady: () => ready, webRoutes: webRoutes(config), ...roles.services });
    await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    await app?.close().catch(() => undefined);
    await roles?.close().catch(() => undefined);
    await store.close().catch(() => undefined);
    throw err;
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const url = config.publicUrl.replace(/:\d+$/, `:${port}`);
  ready = true;

  let closing: Promise<void> | null = null;
  const close = () => {
    if (closing) return closing;
    closing = (async () => {
      ready = false;
      log.info('close() | draining');
      const steps: [string, () => Promise<unknown>][] = [
        ['listeners', () => app!.close()],
        ['roles', () => roles!.close()],
        ['store', () => store.close()],
      ];
      // Every step runs even if one throws.
      for (const [name, step] of steps) {
        try {
          await step();
        } catch (err) {
          log.error({ err }, `close() | ${name} failed`);
        }
      }
      log.info('close() | closed');
    })();
    return closing;
  };
  return { app, store, url, firstKey, close };
}

/**
 * Installs SIGINT/SIGTERM handlers that drain the server once, then exit 0. The drain has a
 * deadline (`DRAIN_TIMEOUT`, seconds): past it the process logs what it was still doing and exits
 * 1, so an orchestrator's SIGKILL never lands first and cuts the logs short. A second signal exits
 * at once.
 */
export function closeOnSignals(server: Pick<RunningServer, 'close'>, logger: Logger, drainTimeoutS: number): void {
  let signalled = false;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      if (signalled) {
        logger.warn({ sig }, 'second signal: exiting now');
        process.exit(1);
      }
      signalled = true;
      logger.info({ sig, drainTimeoutS }, 'shutting down: readiness off, draining');
      const deadline = setTimeout(() => {
        logger.error({ sig, drainTimeoutS }, `drain did not finish within DRAIN_TIMEOUT (${drainTimeoutS} s): exiting with work still open`);
        process.exit(1);
      }, drainTimeoutS * 1000);
      deadline.unref();
      server.close().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    });
  }
}
