/**
 * API keys: `rv_` + 43 base64url characters (32 random bytes). Shown once at creation; the store
 * keeps only the SHA-256 digest. Lookup is by digest, and the digest found is compared with
 * `timingSafeEqual`, so no comparison leaks how much of a guess matched.
 */
import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { newId, type Account, type Plan, type Store } from '../store/index.ts';

export const KEY_PREFIX = 'rv_';
/** The shape of every key we hand out; anything else is refused without a store read. */
export const KEY_PATTERN = /^rv_[A-Za-z0-9_-]{43}$/;

export function digestKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

export interface CreatedKey {
  key: string;
  account: Account;
}

/** Creates an account on `plan` and its first key. The key string is returned once and never stored. */
export async function createAccountWithKey(store: Store, plan: Plan, name = 'default', now = new Date()): Promise<CreatedKey> {
  const account: Account = { id: newId('acc'), plan, name, createdAt: now.toISOString() };
  await store.accounts.create(account);
  const key = await addKey(store, account.id, now);
  return { key, account };
}

export async function addKey(store: Store, accountId: string, now = new Date()): Promise<string> {
  const key = `${KEY_PREFIX}${randomBytes(32).toString('base64url')}`;
  await store.accounts.addKey({
    digest: digestKey(key),
    accountId,
    preview: `${key.slice(0, 7)}…`,
    createdAt: now.toISOString(),
  });
  return key;
}

/** Extracts the bearer token; null when the header is absent or not `Bearer <token>`. */
export function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return m ? (m[1] as string) : null;
}

/** Resolves an API key to its account, or null. Never throws for client input. */
export async function authenticate(store: Store, token: string | null): Promise<Account | null> {
  if (!token || !KEY_PATTERN.test(token)) return null;
  return accountForDigest(store, digestKey(token));
}

/** The account a key digest (hex SHA-256) belongs to, or null: two store reads (key, account). */
export async function accountForDigest(store: Store, digest: string): Promise<Account | null> {
  const found = await store.accounts.findKey(digest);
  if (!found) return null;
  const a = Buffer.from(found.digest, 'hex');
  const b = Buffer.from(digest, 'hex');
  if (a.length !== b.length || !timingSafeEqual(a, b)) return null;
  return store.accounts.get(found.accountId);
}

/** A W3C trace id (32 lowercase hex), taken from `traceparent` when the caller sent one. */
export function traceIdFrom(traceparent: string | undefined): string {
  const m = traceparent ? /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(traceparent) : null;
  if (m && m[1] !== '0'.repeat(32)) return m[1] as string;
  return randomUUID().replace(/-/g, '');
}
