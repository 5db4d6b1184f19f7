/**
 * Which network addresses we are willing to send to (SSRF rules, spec "Endpoint requirements").
 *
 * One rule for every address, whether typed as a literal, returned by DNS at registration or
 * returned by DNS at connect time: the address must be in ipaddr.js's `unicast` range, an IPv6
 * address must lie in global unicast 2000::/3, and IPv4-mapped IPv6 (::ffff:0:0/96) is refused
 * whatever it wraps. That refuses loopback, RFC 1918, link-local, CGNAT, unspecified,
 * multicast, broadcast, reserved/documentation/benchmarking, AS112, AMT, IPv6 ULA, site-local,
 * IPv4-mapped and IPv4-compatible (::/96), SIIT (::ffff:0:0:0/96), NAT64 (64:ff9b::/96,
 * 64:ff9b:1::/48), 6to4 (2002::/16, whatever it embeds), Teredo (2001::/32) and everything else
 * IANA keeps special. Anything we cannot parse is refused (fail closed).
 *
 * A name is acceptable only if EVERY address it resolves to is acceptable (stricter than
 * filtering: no split-horizon tricks), and it is checked again at connect time by `lookup()`
 * so DNS rebinding between registration and delivery gains nothing.
 */
import dns from 'node:dns';
import net from 'node:net';
import type { LookupAddress, LookupOneOptions, LookupAllOptions } from 'node:dns';
import ipaddr from 'ipaddr.js';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to all its A and AAAA addresses. Injectable so tests can simulate DNS. */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export interface AddressPolicyOptions {
  /**
   * Accept 127.0.0.0/8, ::1 and the name `localhost` (nothing else private). Off by default:
   * only for tests and local development; whoever turns it on logs a warning.
   */
  allowLoopback?: boolean;
  /** Default: `dns.lookup(host, {all: true})`, the resolver sockets use (so /etc/hosts counts). */
  resolve?: Resolver;
}

/** Why an address is refused: ipaddr.js's range name, or one of ours. */
export type AddressVerdict = { ok: true } | { ok: false; range: string };

/** Error raised (with `code` `ESSRF`) when a connection would reach a refused address. */
export class BlockedAddressError extends Error {
  override readonly name = 'BlockedAddressError';
  readonly code = 'ESSRF';
  constructor(
    readonly host: string,
    readonly address: string,
    readonly range: string,
  ) {
    super(
      host === address
        ? `address ${address} is not publicly routable (${range})`
        : `${host} resolves to ${address}, which is not publicly routable (${range})`,
    );
  }
}

/** Names that only mean something on a local network, refused before any DNS (RFC 6761, 6762, 8375). */
const LOCAL_SUFFIXES = ['.localhost', '.local', '.internal', '.home.arpa', '.localdomain'];

const GLOBAL_UNICAST_V6 = ipaddr.IPv6.parseCIDR('2000::/3');
const IPV4_COMPATIBLE_V6 = ipaddr.IPv6.parseCIDR('::/96');

const defaultResolver: Resolver = async (hostname) => {
  const found = await dns.promises.lookup(hostname, { all: true, verbatim: true });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

/** Strips IPv6 brackets and one trailing dot, lowercases: the form every check below uses. */
export function normalizeHost(hostname: string): string {
  let h = hostname.toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (h.endsWith('.')) h = h.slice(0, -1);
  return h;
}

export class AddressPolicy {
  readonly allowLoopback: boolean;
  readonly resolve: Resolver;

  constructor(options: AddressPolicyOptions = {}) {
    this.allowLoopback = options.allowLoopback ?? false;
    this.resolve = options.resolve ?? defaultResolver;
  }

  /** Classifies one IP address string (no names). */
  checkAddress(address: string): AddressVerdict {
    if (net.isIP(address) === 0) return { ok: false, range: 'unparseable' };
    let ip: ipaddr.IPv4 | ipaddr.IPv6;
    try {
      ip = ipaddr.parse(address);
    } catch {
      return { ok: false, range: 'unparseable' };
    }
    // No public service needs an IPv4-mapped form; refusing it whole leaves nothing to unwrap.
    if (ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress()) return { ok: false, range: 'ipv4Mapped' };
    const range = ip.range();
    if (range === 'loopback' && this.allowLoopback) return { ok: true };
    if (range !== 'unicast') return { ok: false, range };
    if (ip.kind() === 'ipv6') {
      const v6 = ip as ipaddr.IPv6;
      if (v6.match(IPV4_COMPATIBLE_V6)) return { ok: false, range: 'ipv4Compatible' };
      if (!v6.match(GLOBAL_UNICAST_V6)) return { ok: false, range: 'notGlobalUnicast' };
    }
    return { ok: true };
  }

  /** True for `localhost`, `*.localhost` and other local-only names (given normalized). */
  isLocalName(host: string): boolean {
    if (host === 'localhost') return !this.allowLoopback;
    return LOCAL_SUFFIXES.some((s) => host.endsWith(s)) || !host.includes('.');
  }

  /**
   * Checks a host (name or literal) the way a connection would: literals directly, names through
   * the resolver, every address must pass. Throws `BlockedAddressError` or the resolver's error;
   * returns the addresses that may be dialled.
   */
  async checkHost(hostname: string): Promise<ResolvedAddress[]> {
    const host = normalizeHost(hostname);
    const family = net.isIP(host);
    if (family !== 0) {
      const verdict = this.checkAddress(host);
      if (!verdict.ok) throw new BlockedAddressError(host, host, verdict.range);
      return [{ address: host, family: family === 6 ? 6 : 4 }];
    }
    if (this.isLocalName(host)) throw new BlockedAddressError(host, host, 'localName');
    const addrs = await this.resolve(host);
    if (addrs.length === 0) {
      throw Object.assign(new Error(`${host} has no A or AAAA record`), { code: 'ENOTFOUND' });
    }
    for (const a of addrs) {
      const verdict = this.checkAddress(a.address);
      if (!verdict.ok) throw new BlockedAddressError(host, a.address, verdict.range);
    }
    return addrs;
  }

  /**
   * A `lookup` for `net.connect`/`https.request`: resolves with our resolver and refuses the
   * connection when any address is not allowed, so the socket only ever dials checked addresses
   * (DNS-rebinding safe). Handles the `(host, cb)`, numeric-family and `{all: true}` call forms
   * (Node ≥ 20 asks for all addresses when autoSelectFamily is on).
   */
  readonly lookup = (
    hostname: string,
    options: LookupOneOptions | LookupAllOptions | number | LookupCallback,
    callback?: LookupCallback,
  ): void => {
    const cb = (typeof options === 'function' ? options : callback) as LookupCallback;
    const opts: { family?: number | string; all?: boolean } =
      typeof options === 'number' ? { family: options } : typeof options === 'function' ? {} : options;
    this.checkHost(hostname).then(
      (addrs) => {
        const want = opts.family === 4 || opts.family === 'IPv4' ? 4 : opts.family === 6 || opts.family === 'IPv6' ? 6 : 0;
        const usable = want === 0 ? addrs : addrs.filter((a) => a.family === want);
        const first = usable[0];
        if (first === undefined) {
          cb(Object.assign(new Error(`${hostname} has no IPv${want} address`), { code: 'ENOTFOUND' }), '', 0);
          return;
        }
        if (opts.all) (cb as unknown as LookupAllCallback)(null, usable);
        else cb(null, first.address, first.family);
      },
      (err: NodeJS.ErrnoException) => cb(err, '', 0),
    );
  };
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string, family: number) => void;
type LookupAllCallback = (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void;
