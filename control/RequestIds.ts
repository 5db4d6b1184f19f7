/**
 * Request ids for one process: a random per-process prefix and a counter, e.g. `req_hV3k9QxZ.1a`.
 * The id only joins up log lines, the `X-Request-Id` header and error envelopes (a caller may
 * send its own), so it need not be unguessable, only unique: the 48-bit random prefix keeps
 * replicas and restarts apart, and the counter keeps one process's requests apart without a
 * crypto call per request (a random id per request was ≈ 5 % of the API's hot path).
 */
import { randomBytes } from 'node:crypto';

/** A caller's `X-Request-Id` we keep as ours: short, and only characters safe in logs and headers. */
const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,64}$/;

export class RequestIds {
  readonly #prefix = `req_${randomBytes(6).toString('base64url')}.`;
  #count = 0;

  /** A new id, unique in this process and, with overwhelming odds, across processes. */
  next(): string {
    this.#count += 1;
    return this.#prefix + this.#count.toString(36);
  }

  /** The caller's id when it is sane (so logs join up across services), else a new one. */
  forRequest(given: string | string[] | undefined): string {
    return typeof given === 'string' && SANE_REQUEST_ID.test(given) ? given : this.next();
  }
}
