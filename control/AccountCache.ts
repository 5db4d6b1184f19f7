/**
 * API key → account, cached in-process so the authenticated hot path reads the store once (for
 * the route's own data) instead of three times (key, account, data). An entry lives `ttlMs`
 * (AUTH_CACHE_TTL): a key removed from the store or an account changed there (plan, admission
 * default) is seen by every api replica within that time, since each replica's entry expires on
 * its own; there is no key revocation in the API, so the TTL is the whole invalidation story.
 *
 * Only found keys are kept: an unknown key reads the store every time, so a key added on
 * another replica works at once and guessed keys cannot fill the cache. Entries are keyed by the
 * key's SHA-256 digest, like the store, so the cache holds no key and a Map lookup's timing says
 * nothing usable about one. Concurrent requests with one key share one lookup.
 */
import type { Account, Store } from '../store/index.ts';
import { accountForDigest, digestKey, KEY_PATTERN } from './ApiKeys.ts';

export interface AccountCacheOptions {
  store: Store;
  /** How long a found key's account is reused (ms); 0: every request reads the store. */
  ttlMs: number;
  /** Most keys kept; past it the least recently fetched is dropped. */
  maxEntries: number;
  /** Clock in ms since the epoch; injectable for tests. */
  now?: () => number;
}

interface Entry {
  expiresAt: number;
  account: Promise<Account | null>;
}

export class AccountCache {
  readonly #o: Required<AccountCacheOptions>;
  /** Insertion order is fetch order, so the first entry is the one to drop when full. */
  readonly #entries = new Map<string, Entry>();

  constructor(options: AccountCacheOptions) {
    this.#o = { now: Date.now, ...options };
  }

  /** Resolves a bearer token to its account, or null. Never throws for client input. */
  authenticate(token: string | null): Promise<Account | null> {
    if (!token || !KEY_PATTERN.test(token)) return Promise.resolve(null);
    const digest = digestKey(token);
    if (this.#o.ttlMs === 0) return accountForDigest(this.#o.store, digest);
    const now = this.#o.now();
    const hit = this.#entries.get(digest);
    if (hit && hit.expiresAt > now) return hit.account;

    // Frozen: every request of the key gets this one object for the TTL, so none may change it.
    const account = accountForDigest(this.#o.store, digest).then((a) => (a ? Object.freeze(a) : null));
    const entry: Entry = { expiresAt: now + this.#o.ttlMs, account };
    this.#entries.delete(digest);
    this.#entries.set(digest, entry);
    if (this.#entries.size > this.#o.maxEntries) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
    // Unknown keys and store errors are not kept (the caller still gets the rejection).
    const drop = (): void => {
      if (this.#entries.get(digest) === entry) this.#entries.delete(digest);
    };
    void entry.account.then((account) => {
      if (account === null) drop();
    }, drop);
    return entry.account;
  }

  /** Keys cached now (for tests and metrics). */
  get size(): number {
    return this.#entries.size;
  }
}
