/**
 * Admission rules (who may publish and play beyond the stream key and the playback id): set, read
 * and remove a stream's own rule and its account's default (Area B error shape), and — for the
 * media node — `admit()`, which finds the rule that applies (the stream's, else the account's)
 * and asks the AdmissionGate. Rules are validated when they are set: a hook URL or JWKS URL must
 * pass the webhooks' endpoint rules (HTTPS, public host), a JWKS must be fetchable and hold a
 * signing key, a public key must be one we verify with; the error names the field.
 *
 * The rule of a stream is kept `decisionTtlMs` per stream on the node (LL-HLS asks for every
 * request); a rule set through this process's API takes effect here at once, elsewhere within it.
 */
import type { Logger } from 'pino';
import { streamError } from '../errors/index.ts';
import type { AdmissionRequest, AdmissionVerdict } from '../media/index.ts';
import type { Account, AdmissionAction, AdmissionRule, Store } from '../store/index.ts';
import { isWebhookError, validateEndpointUrl } from '../webhooks/index.ts';
import { type AddressPolicy } from '../outbound/index.ts';
import type { AdmissionGate, AdmissionSettings } from './AdmissionGate.ts';
import { parsePublicKeyPem } from './JwtVerifier.ts';

/** A rule as the API shows and takes it. */
export type AdmissionRuleView =
  | { type: 'hook'; url: string; actions: AdmissionAction[] }
  | { type: 'jwt'; public_key: string | null; jwks_url: string | null; actions: AdmissionAction[] };

/** A rule as the API takes it (`public_key` or `jwks_url`: exactly one). */
export type AdmissionRuleInput =
  | { type: 'hook'; url: string; actions: AdmissionAction[] }
  | { type: 'jwt'; public_key?: string | undefined; jwks_url?: string | undefined; actions: AdmissionAction[] };

/**
 * The rule that applies and where it is set:
 * - `stream`: the stream's own rule;
 * - `account`: the account's default (the stream sets none);
 * - `none`: no rule (the stream key and the playback id are enough).
 */
export type AdmissionSource = 'stream' | 'account' | 'none';

export interface AdmissionView {
  rule: AdmissionRuleView | null;
  source: AdmissionSource;
}

/** One request a rule decided (AdmissionServiceOptions.onDecision): for metrics. */
export interface AdmissionDecision {
  action: AdmissionRequest['action'];
  protocol: AdmissionRequest['protocol'];
  rule: AdmissionRule['type'];
  admitted: boolean;
}

export interface AdmissionServiceOptions {
  store: Store;
  gate: AdmissionGate;
  /** Where hook and JWKS URLs may point (checked when set; the gate's client checks again at every connection). */
  policy: AddressPolicy;
  settings: AdmissionSettings;
  logger: Logger;
  now?: () => number;
  /** Called for every request a rule applied to (not for streams without one); must not throw. */
  onDecision?: (d: AdmissionDecision) => void;
}

/** Streams whose rule is remembered at most (the oldest go first). */
const MAX_RULES = 10_000;

function toView(rule: AdmissionRule | null | undefined): AdmissionRuleView | null {
  if (!rule) return null;
  return rule.type === 'hook' ? { type: 'hook', url: rule.url, actions: rule.actions } : { type: 'jwt', public_key: rule.publicKey, jwks_url: rule.jwksUrl, actions: rule.actions };
}

function invalid(field: string, message: string) {
  return streamError('REQUEST/INVALID', `${field}: ${message}`, { details: { where: 'body', issues: [{ field, message }] } });
}

export class AdmissionService {
  readonly #o: AdmissionServiceOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #rules = new Map<string, { until: number; rule: Promise<{ rule: AdmissionRule | null; playbackId: string } | null> }>();

  constructor(opts: AdmissionServiceOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'AdmissionService' });
    this.#now = opts.now ?? Date.now;
  }

  // ───────────────────────────── API

  async getForStream(account: Account, streamId: string): Promise<AdmissionView> {
    const s = await this.#own(account, streamId);
    if (s.admission) return { rule: toView(s.admission), source: 'stream' };
    const acc = await this.#o.store.accounts.get(account.id);
    return acc?.admission ? { rule: toView(acc.admission), source: 'account' } : { rule: null, source: 'none' };
  }

  async setForStream(account: Account, streamId: string, input: AdmissionRuleInput): Promise<AdmissionView> {
    await this.#own(account, streamId);
    const rule = await this.#validate(input);
    await this.#o.store.streams.update(streamId, { admission: rule });
    this.#rules.delete(streamId);
    this.#log.info(`setForStream() | rule set [streamId:${streamId}] [type:${rule.type}] [actions:${rule.actions.join(',')}]`);
    return { rule: toView(rule), source: 'stream' };
  }

  async clearForStream(account: Account, streamId: string): Promise<AdmissionView> {
    await this.#own(account, streamId);
    await this.#o.store.streams.update(streamId, { admission: null });
    this.#rules.delete(streamId);
    return this.getForStream(account, streamId);
  }

  async getForAccount(account: Account): Promise<AdmissionView> {
    const acc = await this.#o.store.accounts.get(account.id);
    return acc?.admission ? { rule: toView(acc.admission), source: 'account' } : { rule: null, source: 'none' };
  }

  async setForAccount(account: Account, input: AdmissionRuleInput): Promise<AdmissionView> {
    const rule = await this.#validate(input);
    await this.#o.store.accounts.setAdmission(account.id, rule);
    // Any stream of the account may inherit it.
    this.#rules.clear();
    this.#log.info(`setForAccount() | default rule set [accountId:${account.id}] [type:${rule.type}]`);
    return { rule: toView(rule), source: 'account' };
  }

  async clearForAccount(account: Account): Promise<AdmissionView> {
    await this.#o.store.accounts.setAdmission(account.id, null);
    this.#rules.clear();
    return { rule: null, source: 'none' };
  }

  // ───────────────────────────── for the media node

  /** Whether the request may go on: the stream's rule, else its account's, else admitted. */
  async admit(req: AdmissionRequest): Promise<AdmissionVerdict> {
    const found = await this.#ruleOf(req.streamId);
    if (!found?.rule || !found.rule.actions.includes(req.action)) return { admitted: true };
    const verdict = await this.#o.gate.decide(found.rule, { ...req, playbackId: found.playbackId });
    this.#o.onDecision?.({ action: req.action, protocol: req.protocol, rule: found.rule.type, admitted: verdict.admitted });
    return verdict;
  }

  #ruleOf(streamId: string): Promise<{ rule: AdmissionRule | null; playbackId: string } | null> {
    const now = this.#now();
    const hit = this.#rules.get(streamId);
    if (hit && hit.until > now) return hit.rule;
    const entry = { until: now + this.#o.settings.decisionTtlMs, rule: this.#load(streamId) };
    // A failed read is not remembered: the next request reads again.
    entry.rule.catch(() => this.#rules.get(streamId) === entry && this.#rules.delete(streamId));
    this.#rules.delete(streamId);
    if (this.#rules.size >= MAX_RULES) this.#rules.delete(this.#rules.keys().next().value as string);
    this.#rules.set(streamId, entry);
    return entry.rule;
  }

  async #load(streamId: string): Promise<{ rule: AdmissionRule | null; playbackId: string } | null> {
    const s = await this.#o.store.streams.get(streamId);
    if (!s) return null;
    if (s.admission) return { rule: s.admission, playbackId: s.playbackId };
    const acc = await this.#o.store.accounts.get(s.accountId);
    return { rule: acc?.admission ?? null, playbackId: s.playbackId };
  }

  async #own(account: Account, streamId: string) {
    const s = await this.#o.store.streams.get(streamId);
    if (!s || s.deleted || s.accountId !== account.id) throw streamError('STREAMS/NOT_FOUND', `No stream ${streamId} on this account.`, { details: { id: streamId } });
    return s;
  }

  async #validate(input: AdmissionRuleInput): Promise<AdmissionRule> {
    const actions = [...new Set(input.actions)];
    if (input.type === 'hook') return { type: 'hook', url: await this.#url('url', input.url), actions };
    const pem = input.public_key;
    const jwks = input.jwks_url;
    if ((pem === undefined) === (jwks === undefined)) throw invalid(pem === undefined ? 'public_key' : 'jwks_url', 'give exactly one of public_key and jwks_url');
    if (pem !== undefined) {
      try {
        parsePublicKeyPem(pem);
      } catch (err) {
        throw invalid('public_key', (err as Error).message);
      }
      return { type: 'jwt', publicKey: pem, jwksUrl: null, actions };
    }
    const url = await this.#url('jwks_url', jwks!);
    const cache = this.#o.gate.jwks;
    if (!cache) throw invalid('jwks_url', 'this server cannot fetch a JWKS: give public_key');
    try {
      await cache.keys(url);
    } catch (err) {
      throw invalid('jwks_url', `the JWKS could not be used: ${(err as Error).message}`);
    }
    return { type: 'jwt', publicKey: null, jwksUrl: url, actions };
  }

  async #url(field: string, raw: string): Promise<string> {
    try {
      return await validateEndpointUrl(raw, this.#o.policy);
    } catch (err) {
      if (isWebhookError(err)) throw invalid(field, err.message.replace(/^url /, ''));
      throw err;
    }
  }
}
