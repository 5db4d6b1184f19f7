/**
 * Short-lived signed download links: HMAC-SHA256 over `<path>\n<expires>` with a server secret.
 * The stable take URLs redirect (302) to these; the file route verifies them when fetched.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** How long a signed link works, in seconds (10 minutes: long enough to start a download). */
export const LINK_TTL_S = 600;

export class LinkSigner {
  readonly #secret: Buffer;
  readonly #now: () => number;

  constructor(secret: string | Buffer, now: () => number = Date.now) {
    this.#secret = Buffer.isBuffer(secret) ? secret : Buffer.from(secret, 'utf8');
    this.#now = now;
  }

  /** A secret for another purpose, derived from this one (same on every process that shares it). */
  derive(purpose: string): string {
    return createHmac('sha256', this.#secret).update(`derive:${purpose}`).digest('base64url');
  }

  /** The secret from config, else one generated once and kept in DATA_DIR (embedded default). */
  static fromConfig(configured: string | null, dataDir: string, now?: () => number): LinkSigner {
    if (configured) return new LinkSigner(configured, now);
    const file = join(dataDir, 'link-signing.secret');
    let secret: string;
    try {
      secret = readFileSync(file, 'utf8').trim();
    } catch {
      mkdirSync(dataDir, { recursive: true });
      secret = randomBytes(32).toString('base64url');
      writeFileSync(file, secret, { mode: 0o600, flag: 'wx' });
    }
    return new LinkSigner(secret, now);
  }

  #mac(path: string, expires: number): Buffer {
    return createHmac('sha256', this.#secret).update(`${path}\n${expires}`).digest();
  }

  /** `path?expires=…&signature=…`, valid for `ttlS` seconds. */
  sign(path: string, ttlS = LINK_TTL_S): string {
    const expires = Math.floor(this.#now() / 1000) + ttlS;
    return `${path}?expires=${expires}&signature=${this.#mac(path, expires).toString('base64url')}`;
  }

  /** True when the signature matches and has not expired. Constant-time comparison. */
  verify(path: string, expires: number, signature: string): boolean {
    if (!Number.isSafeInteger(expires) || expires < Math.floor(this.#now() / 1000)) return false;
    const given = Buffer.from(signature, 'base64url');
    const want = this.#mac(path, expires);
    return given.length === want.length && timingSafeEqual(given, want);
  }
}
