/**
 * Public API of outbound/: how the server reaches addresses that users chose (webhook endpoints,
 * admission hooks and JWKS, RTMP destinations, slate and style image URLs) without being turned
 * against the network it runs in. `AddressPolicy` says which addresses may be reached (and
 * resolves names so that the address checked is the address dialled); `SafeHttpClient` is the
 * HTTP(S) client that keeps to it.
 */
export { AddressPolicy, BlockedAddressError, normalizeHost } from './AddressPolicy.ts';
export type { AddressPolicyOptions, AddressVerdict, Resolver, ResolvedAddress } from './AddressPolicy.ts';
export { SafeHttpClient, SafeHttpError, SAFE_HTTP_DEFAULTS } from './SafeHttpClient.ts';
export type { SafeHttpClientOptions, SafeRequestOptions, SafeResponse, SafeHttpErrorKind } from './SafeHttpClient.ts';
