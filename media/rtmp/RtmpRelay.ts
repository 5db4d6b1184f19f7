/**
 * The one way an RTMP push leaves the node: ffmpeg dials this relay on loopback, and the relay
 * dials the third party's server itself, at an address the outbound policy has just checked.
 *
 *   ffmpeg ─rtmp://127.0.0.1:<relay>/ (-rtmp_app, -rtmp_playpath)─► RtmpRelay ─check(host)─► net/tls.connect(checked address)
 *
 * Why not let ffmpeg dial the URL: ffmpeg resolves the name itself, so a check made before it runs
 * says nothing about where it connects (DNS rebinding), and it would happily dial 127.0.0.1 or the
 * cloud metadata address. Here every connection — the first and each reconnect — resolves, checks
 * every address (the webhooks' SSRF rules, injected as `OutboundPolicy`) and connects to the
 * address that passed. For `rtmps://` the relay speaks TLS with the URL's host name as SNI and
 * verifies the certificate against the system's CAs (ffmpeg verifies nothing by default); ffmpeg
 * speaks plain RTMP to the relay, with `tcUrl` still naming the real server.
 */
import net from 'node:net';
import tls from 'node:tls';

/** Where a push may connect: the address policy the control plane gives (outbound/'s AddressPolicy). */
export interface OutboundPolicy {
  /** Resolves `host` (a name or a literal) and returns the addresses that may be dialled; throws why not. */
  checkHost(host: string): Promise<{ address: string }[]>;
}

/** An `rtmp://` / `rtmps://` target, split the way ffmpeg reads it (tidied: see parseRtmpTarget). */
export interface RtmpTarget {
  tls: boolean;
  /** Host as written (brackets stripped for IPv6). */
  host: string;
  /** Default 1935 (rtmp) or 443 (rtmps). */
  port: number;
  /** The RTMP application (`-rtmp_app`): `live2`, or `app/instance`. */
  app: string;
  /** The stream name published (`-rtmp_playpath`): the stream key, with the URL's query if any. */
  playpath: string;
  /** Scheme, host and port as written: `rtmps://live.example.com:443`. */
  origin: string;
  /** What the RTMP `connect` names as the server (`-rtmp_tcurl`): scheme, host, port, app. */
  tcUrl: string;
  /** Every secret form the URL holds (stream name raw and decoded, query and its values, userinfo), to scrub from text ffmpeg prints. */
  secrets: string[];
}

/**
 * Splits an RTMP URL into server, application and stream name, by ffmpeg's rule (rtmpproto.c
 * `rtmp_open`): with three or more path segments the application is the first two (an application
 * instance, Wowza's `app/instance/stream`) unless the second holds a `:` (`vod/mp4:dir/file`),
 * else it is the first; the rest is the stream name, with the query (Facebook's
 * `rtmps://…:443/rtmp/KEY?s_bl=1&s_sc=…` needs it: the service's "stream key" is `KEY?s_bl=…`).
 * Unlike ffmpeg, empty segments are dropped first: a trailing `/` (`/app/KEY/`) or a doubled one
 * would otherwise make ffmpeg read `app/KEY` as the application and publish an empty name. The
 * fragment has no meaning in RTMP and is dropped; userinfo is not sent (ffmpeg's Adobe/Limelight
 * auth is not supported) but counts as a secret.
 */
export function parseRtmpTarget(url: string): RtmpTarget {
  const u = new URL(url);
  if (u.protocol !== 'rtmp:' && u.protocol !== 'rtmps:') throw new Error(`not an rtmp(s) URL: ${u.protocol}`);
  const isTls = u.protocol === 'rtmps:';
  const host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  const port = u.port ? Number(u.port) : isTls ? 443 : 1935;
  const segments = u.pathname.split('/').filter((s) => s !== '');
  const appSegments = segments.length >= 3 && !segments[1]!.includes(':') ? 2 : Math.min(1, segments.length);
  let app = segments.slice(0, appSegments).join('/');
  let playpath = segments.slice(appSegments).join('/');
  // ffmpeg: with no stream name in the path the query belongs to the application (`app?token`).
  if (playpath === '') app += u.search;
  else playpath += u.search;
  const decode = (s: string) => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s;
    }
  };
  // A lone segment may be a key pasted without its application (redactRtmpUrl hides it too).
  // Each query value too: services put tokens there (Facebook's `a=…`) that may print alone.
  const raw = [playpath, segments.slice(appSegments).join('/'), u.search.slice(1), ...u.search.slice(1).split('&').map((p) => p.slice(p.indexOf('=') + 1)), u.username, u.password, ...(playpath === '' ? [app] : [])];
  const secrets = [...new Set([...raw, ...raw.map(decode)])].filter((s) => s.length >= 3);
  return { tls: isTls, host, port, app, playpath, origin: `${u.protocol}//${u.host}`, tcUrl: `${u.protocol}//${u.host}/${app}`, secrets };
}

/**
 * What logs and status show of an RTMP URL: scheme, host, port and the first path segment (the
 * application, which every service puts first), then `…` for whatever follows — further segments
 * (an instance, the key), the query, the fragment — and `…@` for userinfo. Conservative on
 * purpose: which segment is the key differs by service and by trailing slashes, so nothing after
 * the application is shown. A lone segment may be a key pasted without its application: hidden
 * too. Unparseable input shows nothing of itself.
 */
export function redactRtmpUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return 'rtmp://…';
  }
  const scheme = u.protocol === 'rtmps:' ? 'rtmps:' : 'rtmp:';
  const userinfo = u.username || u.password ? '…@' : '';
  const segments = u.pathname.split('/').filter((s) => s !== '');
  const more = segments.length > 1 || u.search !== '' || u.hash !== '';
  const shown = segments.length > 1 || (segments.length === 1 && more) ? `/${segments[0]}` : '';
  return `${scheme}//${userinfo}${u.host}${shown}${segments.length > 0 || more ? '/…' : ''}`;
}

/**
 * Text ffmpeg printed about `target`, without its secrets: every spelling of the stream key (and
 * userinfo) becomes `…`, the relay's loopback URL becomes the real server, and any RTMP URL left
 * is shown as redactRtmpUrl shows it.
 */
export function redactRtmpText(text: string, target: RtmpTarget): string {
  let out = text;
  // Longest first: a key without its query must not leave the query's tail behind.
  for (const secret of [...target.secrets].sort((a, b) => b.length - a.length)) out = out.split(secret).join('…');
  return out.replace(/rtmps?:\/\/127\.0\.0\.1:\d+\/?/gi, `${target.origin}/`).replace(/rtmps?:\/\/[^\s'"]*[^\s'":,.]/gi, (u) => redactRtmpUrl(u));
}

export interface RtmpRelayOptions {
  target: RtmpTarget;
  /** No policy: dial what DNS says (only embedders without a control plane; `reverie serve` always passes one). */
  policy?: OutboundPolicy;
  /** ms to establish the outbound TCP/TLS connection. Default 10 000. */
  connectTimeoutMs?: number;
}

export class RtmpRelay {
  readonly #opts: RtmpRelayOptions;
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  /** Why the latest outbound connection failed (refused by policy, unreachable, TLS), or undefined. */
  lastError: string | undefined;

  constructor(opts: RtmpRelayOptions) {
    this.#opts = opts;
    this.#server = net.createServer((inbound) => this.#relay(inbound));
    this.#server.on('error', () => undefined); // listen errors reject listen(); nothing else reaches here
  }

  /** Listens on an ephemeral loopback port; returns the URL ffmpeg should push to. */
  async listen(): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(0, '127.0.0.1', () => {
        this.#server.off('error', reject);
        resolve();
      });
    });
    const { port } = this.#server.address() as net.AddressInfo;
    // Application and stream name go to ffmpeg as options (RtmpPush): the URL carries no secret.
    return `rtmp://127.0.0.1:${port}/`;
  }

  #relay(inbound: net.Socket): void {
    this.#sockets.add(inbound);
    inbound.once('close', () => this.#sockets.delete(inbound));
    inbound.on('error', () => undefined);
    inbound.pause(); // ffmpeg's handshake waits in the socket until the far end is connected
    const { target } = this.#opts;
    const fail = (why: string) => {
      this.lastError = why;
      inbound.destroy();
    };
    const addresses = this.#opts.policy ? this.#opts.policy.checkHost(target.host) : Promise.resolve([{ address: target.host }]);
    addresses.then(
      (list) => {
        const address = list[0]?.address;
        if (!address || inbound.destroyed) return fail(address ? 'ffmpeg left' : `${target.host} has no address`);
        const common = { host: address, port: target.port, timeout: this.#opts.connectTimeoutMs ?? 10_000 };
        const outbound = target.tls
          ? tls.connect({ ...common, ...(net.isIP(target.host) === 0 ? { servername: target.host } : {}) })
          : net.connect(common);
        this.#sockets.add(outbound);
        outbound.once('close', () => {
          this.#sockets.delete(outbound);
          inbound.destroy();
        });
        outbound.once('timeout', () => outbound.destroy(new Error(`connecting to ${target.host}:${target.port} timed out`)));
        outbound.on('error', (err) => fail(`${target.host}:${target.port}: ${err.message}`));
        outbound.once(target.tls ? 'secureConnect' : 'connect', () => {
          outbound.setTimeout(0);
          this.lastError = undefined;
          inbound.pipe(outbound);
          outbound.pipe(inbound);
          inbound.resume();
        });
        inbound.once('close', () => outbound.destroy());
      },
      (err: unknown) => fail(`refused: ${err instanceof Error ? err.message : String(err)}`),
    );
  }

  close(): void {
    this.#server.close();
    for (const s of this.#sockets) s.destroy();
    this.#sockets.clear();
  }
}
