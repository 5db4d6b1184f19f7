import type { Redis } from 'ioredis';
import { StoreError } from './errors.ts';
import { checkNodeName, checkTtl } from './NodeRegistry.ts';
import type { NodeEntry, NodeRegistry } from './Store.ts';

/**
 * The Redis store's registry: one hash per kind, `<prefix>nodes:<kind>`, field = node id, value =
 * the entry's JSON. A beat is one HSET (no TTL on the key: an expired entry must stay visible until
 * a sweeper has ended what the node owned). With AOF the registry survives a Redis restart like
 * the rest of the state; nodes re-beat within one interval anyway.
 */
export class RedisNodeRegistry implements NodeRegistry {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly now: () => number,
    private readonly isClosing: () => boolean,
  ) {}

  #key(kind: string): string {
    if (this.isClosing()) throw new StoreError('closed', 'store is closed');
    checkNodeName('kind', kind);
    return `${this.prefix}nodes:${kind}`;
  }

  async beat(kind: string, id: string, info: unknown, ttlMs: number): Promise<void> {
    const key = this.#key(kind);
    checkNodeName('id', id);
    checkTtl(ttlMs);
    const now = this.now();
    const entry: NodeEntry = { id, info: info ?? null, lastBeatMs: now, expiresAtMs: now + Math.round(ttlMs) };
    await this.redis.hset(key, id, JSON.stringify(entry));
  }

  async list(kind: string): Promise<NodeEntry[]> {
    const all = await this.redis.hgetall(this.#key(kind));
    return Object.keys(all)
      .sort()
      .map((id) => JSON.parse(all[id] as string) as NodeEntry);
  }

  async remove(kind: string, id: string): Promise<boolean> {
    const key = this.#key(kind);
    checkNodeName('id', id);
    return (await this.redis.hdel(key, id)) === 1;
  }
}
