/**
 * Registration rules for an endpoint URL (spec "Endpoint requirements"): HTTPS only, no
 * credentials, at most 2048 characters, and a host that is publicly routable, by literal or by
 * every A/AAAA record it resolves to. The same address rules run again at every connection
 * (SafeHttpClient), so passing here is necessary, never sufficient.
 */
import net from 'node:net';
import { BlockedAddressError, normalizeHost } from '../outbound/index.ts';
import type { AddressPolicy } from '../outbound/index.ts';
import { WebhookError } from './errors.ts';
import type { UrlRejectReason } from './errors.ts';

export const MAX_URL_LENGTH = 2048;

function reject(reason: UrlRejectReason, message: string, extra: { address?: string; range?: string } = {}, cause?: unknown): WebhookError {
  return new WebhookError('WEBHOOKS/URL_REJECTED', message, { field: 'url', reason, ...extra }, cause === undefined ? undefined : { cause });
}

/** Returns the normalised URL (`URL.href`) or throws `WEBHOOKS/URL_REJECTED`. */
export async function validateEndpointUrl(raw: string, policy: AddressPolicy): Promise<string> {
  if (raw.length > MAX_URL_LENGTH) throw reject('too_long', `url is longer than ${MAX_URL_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch (cause) {
    throw reject('invalid_url', 'url is not a valid absolute URL', {}, cause);
  }
  if (url.protocol !== 'https:') throw reject('not_https', `url must use https (got ${url.protocol.replace(/:$/, '')})`);
  if (url.username !== '' || url.password !== '') throw reject('credentials', 'url must not contain credentials');
  const host = normalizeHost(url.hostname);
  if (host === '') throw reject('invalid_url', 'url has no host');
  if (net.isIP(host) === 0 && policy.isLocalName(host)) {
    throw reject('local_name', `url host ${host} is a local-only name, not a public one`);
  }
  try {
    await policy.checkHost(host);
  } catch (err) {
    if (err instanceof BlockedAddressError) {
      throw reject('private_address', `url host ${err.message}`, { address: err.address, range: err.range }, err);
    }
    const code = (err as NodeJS.ErrnoException).code;
    throw reject('unresolvable', `url host ${host} does not resolve${code !== undefined ? ` (${code})` : ''}`, {}, err);
  }
  return url.href;
}
