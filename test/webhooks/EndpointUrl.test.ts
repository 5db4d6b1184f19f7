import t from 'tap';
import { AddressPolicy } from '../../outbound/index.ts';
import type { ResolvedAddress, Resolver } from '../../outbound/index.ts';
import { validateEndpointUrl } from '../../webhooks/EndpointUrl.ts';
import { WebhookError } from '../../webhooks/errors.ts';

/** Fake DNS: these names and nothing else (the machines have no outside DNS). */
const zone: Record<string, string[]> = {
  'hooks.example.com': ['93.184.216.34'],
  'v6.example.com': ['2606:4700:4700::1111'],
  'dual.example.com': ['93.184.216.34', '2606:4700:4700::1111'],
  'private.example.com': ['10.1.2.3'],
  'loop.example.com': ['127.0.0.1'],
  'mixed.example.com': ['93.184.216.34', '127.0.0.1'],
  'mixed6.example.com': ['2606:4700:4700::1111', 'fd12:3456::1'],
  'v6private.example.com': ['fd12:3456::1'],
  'mapped.example.com': ['::ffff:192.168.0.1'],
  'meta.example.com': ['169.254.169.254'],
  'cgnat.example.com': ['100.100.100.100'],
  'nat64.example.com': ['64:ff9b::a9fe:a9fe'],
};
const resolve: Resolver = async (host) => {
  const found = zone[host];
  if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  return found.map((address): ResolvedAddress => ({ address, family: address.includes(':') ? 6 : 4 }));
};
const policy = new AddressPolicy({ resolve });

type Row = [url: string, reason: string, why: string];
const rejected: Row[] = [
  ['http://hooks.example.com/hook', 'not_https', 'plain http'],
  ['ftp://hooks.example.com/', 'not_https', 'other scheme'],
  ['https://user:pw@hooks.example.com/', 'credentials', 'userinfo'],
  ['not a url', 'invalid_url', 'unparsable'],
  [`https://hooks.example.com/${'a'.repeat(2100)}`, 'too_long', 'over 2048 characters'],
  ['https://127.0.0.1/', 'private_address', 'loopback'],
  ['https://127.0.0.1./', 'private_address', 'loopback with trailing dot'],
  ['https://2130706433/', 'private_address', 'decimal IPv4'],
  ['https://0x7f000001/', 'private_address', 'hex IPv4'],
  ['https://0x7f.1/', 'private_address', 'short hex IPv4'],
  ['https://0x7f.0x0.0x0.0x1/', 'private_address', 'dotted hex IPv4'],
  ['https://0177.0.0.1/', 'private_address', 'octal IPv4'],
  ['https://017700000001/', 'private_address', 'octal 32-bit IPv4'],
  ['https://127.000.000.001/', 'private_address', 'zero-padded IPv4'],
  ['https://127.1/', 'private_address', 'short IPv4'],
  ['https://%31%32%37.0.0.1/', 'private_address', 'percent-encoded IPv4'],
  ['https://0/', 'private_address', '0 = 0.0.0.0'],
  ['https://0.0.0.0/', 'private_address', 'unspecified'],
  ['https://10.0.0.1/', 'private_address', 'RFC 1918 10/8'],
  ['https://172.16.5.4/', 'private_address', 'RFC 1918 172.16/12'],
  ['https://172.31.255.255/', 'private_address', 'RFC 1918 top of 172.16/12'],
  ['https://192.168.1.1/', 'private_address', 'RFC 1918 192.168/16'],
  ['https://169.254.169.254/latest/meta-data', 'private_address', 'link-local metadata'],
  ['https://100.64.0.1/', 'private_address', 'CGNAT'],
  ['https://224.0.0.1/', 'private_address', 'multicast'],
  ['https://255.255.255.255/', 'private_address', 'broadcast'],
  ['https://240.0.0.1/', 'private_address', 'reserved 240/4'],
  ['https://192.0.0.8/', 'private_address', 'IETF protocol assignments'],
  ['https://192.0.2.10/', 'private_address', 'documentation TEST-NET-1'],
  ['https://198.51.100.7/', 'private_address', 'documentation TEST-NET-2'],
  ['https://203.0.113.9/', 'private_address', 'documentation TEST-NET-3'],
  ['https://198.18.0.1/', 'private_address', 'benchmarking'],
  ['https://192.88.99.1/', 'private_address', '6to4 relay anycast'],
  ['https://[::1]/', 'private_address', 'IPv6 loopback'],
  ['https://[::]/', 'private_address', 'IPv6 unspecified'],
  ['https://[::ffff:127.0.0.1]/', 'private_address', 'IPv4-mapped loopback'],
  ['https://[0:0:0:0:0:ffff:7f00:1]/', 'private_address', 'IPv4-mapped loopback, long form'],
  ['https://[::ffff:10.0.0.1]/', 'private_address', 'IPv4-mapped private'],
  ['https://[::ffff:169.254.169.254]/', 'private_address', 'IPv4-mapped metadata'],
  ['https://[::ffff:8.8.8.8]/', 'private_address', 'IPv4-mapped, even of a public address'],
  ['https://[::ffff:0:7f00:1]/', 'private_address', 'SIIT ::ffff:0:0:0/96'],
  ['https://[::127.0.0.1]/', 'private_address', 'IPv4-compatible'],
  ['https://[::808:808]/', 'private_address', 'IPv4-compatible of a public address'],
  ['https://[64:ff9b::7f00:1]/', 'private_address', 'NAT64 of loopback'],
  ['https://[64:ff9b::a9fe:a9fe]/', 'private_address', 'NAT64 of metadata'],
  ['https://[64:ff9b:1::a00:1]/', 'private_address', 'NAT64 local-use /48'],
  ['https://[2002:7f00:1::]/', 'private_address', '6to4 embedding 127.0.0.1'],
  ['https://[2002:c0a8:101::1]/', 'private_address', '6to4 embedding 192.168.1.1'],
  ['https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/', 'private_address', 'Teredo'],
  ['https://[fc00::1]/', 'private_address', 'ULA fc00::/7'],
  ['https://[fd00:ec2::254]/', 'private_address', 'AWS IMDSv6 (ULA)'],
  ['https://[fe80::1]/', 'private_address', 'IPv6 link-local'],
  ['https://[fec0::1]/', 'private_address', 'IPv6 site-local'],
  ['https://[ff02::1]/', 'private_address', 'IPv6 multicast'],
  ['https://[2001:db8::1]/', 'private_address', 'IPv6 documentation'],
  ['https://[100::1]/', 'private_address', 'IPv6 discard'],
  ['https://localhost/', 'local_name', 'localhost'],
  ['https://localhost./', 'local_name', 'localhost with trailing dot'],
  ['https://LOCALHOST:8443/', 'local_name', 'upper-case localhost with port'],
  ['https://api.localhost/', 'local_name', '*.localhost'],
  ['https://printer.local/', 'local_name', 'mDNS .local'],
  ['https://metadata.google.internal/', 'local_name', '.internal'],
  ['https://router.home.arpa/', 'local_name', '.home.arpa'],
  ['https://intranet/', 'local_name', 'single-label name'],
  ['https://private.example.com/', 'private_address', 'name resolving to RFC 1918'],
  ['https://private.example.com./', 'private_address', 'trailing-dot name resolving to RFC 1918'],
  ['https://loop.example.com/', 'private_address', 'name resolving to loopback'],
  ['https://mixed.example.com/', 'private_address', 'name with one public and one loopback A'],
  ['https://mixed6.example.com/', 'private_address', 'name with a public AAAA and a ULA AAAA'],
  ['https://v6private.example.com/', 'private_address', 'name with a ULA AAAA'],
  ['https://mapped.example.com/', 'private_address', 'name resolving to IPv4-mapped private'],
  ['https://meta.example.com/', 'private_address', 'name resolving to metadata'],
  ['https://cgnat.example.com/', 'private_address', 'name resolving to CGNAT'],
  ['https://nat64.example.com/', 'private_address', 'name resolving to NAT64 of metadata'],
  ['https://nxdomain.example.com/', 'unresolvable', 'name that does not resolve'],
];

void t.test(`${rejected.length} address forms are all rejected with URL_REJECTED and a reason`, { timeout: 20_000 }, async (t) => {
  t.ok(rejected.length >= 40);
  for (const [url, reason, why] of rejected) {
    const err = await validateEndpointUrl(url, policy).then(
      () => null,
      (e: unknown) => e,
    );
    if (!(err instanceof WebhookError)) {
      t.fail(`${why}: ${url.slice(0, 60)} was accepted or threw ${String(err)}`);
      continue;
    }
    t.equal(err.code, 'WEBHOOKS/URL_REJECTED', why);
    t.equal(err.details.field, 'url');
    t.equal(err.details.reason, reason, `${why}: reason (${err.message})`);
  }
});

void t.test('rejection messages name the address and its range', { timeout: 10_000 }, async (t) => {
  const err = (await validateEndpointUrl('https://mixed.example.com/x', policy).catch((e: unknown) => e)) as WebhookError;
  t.equal(err.details.address, '127.0.0.1');
  t.equal(err.details.range, 'loopback');
  t.match(err.message, /mixed\.example\.com resolves to 127\.0\.0\.1.*loopback/);
  const lit = (await validateEndpointUrl('https://0x7f.1/', policy).catch((e: unknown) => e)) as WebhookError;
  t.match(lit.message, /127\.0\.0\.1 is not publicly routable \(loopback\)/);
});

void t.test('public addresses and names are accepted and normalised', { timeout: 10_000 }, async (t) => {
  const accepted: [string, string][] = [
    ['https://hooks.example.com/hook', 'https://hooks.example.com/hook'],
    ['https://HOOKS.example.com:8443/a?b=1', 'https://hooks.example.com:8443/a?b=1'],
    ['https://hooks.example.com./hook', 'https://hooks.example.com./hook'],
    ['https://v6.example.com/', 'https://v6.example.com/'],
    ['https://dual.example.com/', 'https://dual.example.com/'],
    ['https://93.184.216.34/', 'https://93.184.216.34/'],
    ['https://8.8.8.8./x', 'https://8.8.8.8/x'],
    ['https://[2606:4700:4700::1111]/', 'https://[2606:4700:4700::1111]/'],
    ['https://1.1.1.1:443/', 'https://1.1.1.1/'],
  ];
  for (const [url, href] of accepted) t.equal(await validateEndpointUrl(url, policy), href, url);
});

void t.test('allowLoopback admits loopback and localhost, nothing else private', { timeout: 10_000 }, async (t) => {
  const loose = new AddressPolicy({ resolve, allowLoopback: true });
  t.equal(await validateEndpointUrl('https://127.0.0.1:8443/', loose), 'https://127.0.0.1:8443/');
  t.equal(await validateEndpointUrl('https://[::1]/', loose), 'https://[::1]/');
  t.equal(await validateEndpointUrl('https://loop.example.com/', loose), 'https://loop.example.com/');
  const reason = (url: string) =>
    validateEndpointUrl(url, loose).then(
      () => 'accepted',
      (e: WebhookError) => e.details.reason,
    );
  t.equal(await reason('https://10.0.0.1/'), 'private_address');
  t.equal(await reason('https://[::ffff:127.0.0.1]/'), 'private_address');
  t.equal(await reason('http://127.0.0.1/'), 'not_https');
});
