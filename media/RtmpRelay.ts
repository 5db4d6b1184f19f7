/**
 * The one way an RTMP push leaves the node: ffmpeg dials this relay on loopback, and the relay
 * dials the third party's server itself, at an address the outbound policy has just checked.
 *
 *   ffmpeg ─rtmp://127.0.0.1:<relay>/<app>/<key>─► RtmpRelay ─check(host)─► net/tls.connect(checked address)
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

/** Where a push may connect: the address policy the control plane gives (webhooks' AddressPolicy). */
export interface OutboundPolicy {
  /** Resolves `host` (a name or a literal) and returns the addresses that may be dialled; throws why not. */
  checkHost(host: string): Promise<{ address: string }[]>;
}

/** An `rtmp://` / `rtmps://` target, split the way ffmpeg reads it. */
export interface RtmpTarget {
  tls: boolean;
  /** Host as written (brackets stripped for IPv6). */
  host: string;
  /** Default 1935 (rtmp) or 443 (rtmps). */
  port: number;
  /** Path and query, unchanged: ffmpeg derives app and playpath from it. */
  pathAndQuery: string;
  /** Scheme, host and port as written: `rtmps://live.example.com:443`. */
  origin: string;
  /** What the RTMP `connect` names as the server (`-rtmp_tcurl`): scheme, host, port, app. */
  tcUrl: string;
  /** The secret part (playpath and query: usually the stream key), for redaction. */
  secret: string;
}

export function parseRtmpTarget(url: string): RtmpTarget {
  const u = new URL(url);
  if (u.protocol !== 'rtmp:' && u.protocol !== 'rtmps:') throw new Error(`not an rtmp(s) URL: ${u.protocol}`);
  const isTls = u.protocol === 'rtmps:';
  const host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  const port = u.port ? Number(u.port) : isTls ? 443 : 1935;
  // ffmpeg's rule (rtmpproto.c): with two or more segments after the app, the app is the first two
  // (an application instance), else the first; the rest is the playpath.
  const segments = u.pathname.slice(1).split('/');
  const app = segments.length <= 1 ? '' : segments.length === 2 ? segments[0]! : `${segments[0]}/${segments[1]}`;
  const secret = `${segments.slice(app === '' ? 0 : app.split('/').length).join('/')}${u.search}`;
  return { tls: isTls, host, port, origin: `${u.protocol}//${u.host}`, pathAndQuery: `${u.pathname}${u.search}`, tcUrl: `${u.protocol}//${u.host}/${app}`, secret };
}

/** The URL with its playpath and query (the stream key) replaced by `…`: what logs and status show. */
export function redactRtmpUrl(url: string): string {
  try {
    const t = parseRtmpTarget(url);
    return t.secret ? `${t.tcUrl.replace(/\/$/, '')}/…` : t.tcUrl;
  } catch {
    return 'rtmp://…';
  }
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
    return `rtmp://127.0.0.1:${port}${this.#opts.target.pathAndQuery}`;
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
