import type { Logger } from 'pino';
import { EmbeddedStore } from './EmbeddedStore.ts';
import { RedisStore } from './RedisStore.ts';
import type { Store } from './Store.ts';

export interface CreateStoreOptions {
  /** DATA_DIR: the embedded store keeps `reverie.db` here. Unused with Redis. */
  dataDir: string;
  /** REDIS_URL: when set, the Redis store is used (scale-out). */
  redisUrl?: string | undefined;
  /** Key prefix on Redis; default `rv:`. */
  redisPrefix?: string | undefined;
  /** Clock in ms since the epoch; default `Date.now`. */
  now?: () => number;
  logger?: Logger;
}

/** The store the process runs on: Redis when `redisUrl` is set, else embedded SQLite. */
export async function createStore(options: CreateStoreOptions): Promise<Store> {
  const common = {
    ...(options.now ? { now: options.now } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  };
  if (options.redisUrl) {
    return RedisStore.open({
      url: options.redisUrl,
      ...(options.redisPrefix ? { prefix: options.redisPrefix } : {}),
      ...common,
    });
  }
  return EmbeddedStore.open({ dataDir: options.dataDir, ...common });
}
