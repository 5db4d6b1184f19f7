/**
 * `reverie doctor`: checks the system dependencies the other parts need and says exactly what is
 * missing and how to install it. Read-only; exits non-zero when something required is missing.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { accessSync, constants, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { networkInterfaces } from 'node:os';
import { promisify } from 'node:util';
import { udpRecvBufferCap } from '../media/index.ts';
import type { Config } from './config.ts';

const run = promisify(execFile);
const require = createRequire(import.meta.url);

/** Who needs a check: `required` for serving at all, `media`/`songs` for those parts, `tests` for the test suite. */
export type CheckNeed = 'required' | 'songs' | 'media' | 'tests';

export interface CheckResult {
  name: string;
  need: CheckNeed;
  ok: boolean;
  detail: string;
  /** How to fix it when not ok. */
  fix: string | null;
}

const APT = (pkgs: string) => `apt-get update && apt-get install -y --no-install-recommends ${pkgs}`;

/** GStreamer elements the media path uses, with the Debian package that ships each. */
const GST_ELEMENTS: [string, string][] = [
  ['appsrc', 'gstreamer1.0-plugins-base'],
  ['appsink', 'gstreamer1.0-plugins-base'],
  ['videoconvert', 'gstreamer1.0-plugins-base'],
  ['videoscale', 'gstreamer1.0-plugins-base'],
  ['vp8dec', 'gstreamer1.0-plugins-good'],
  ['opusdec', 'gstreamer1.0-plugins-base'],
  ['avdec_h264', 'gstreamer1.0-libav'],
  ['x264enc', 'gstreamer1.0-plugins-ugly'],
  ['h264parse', 'gstreamer1.0-plugins-bad'],
  ['rtpopusdepay', 'gstreamer1.0-plugins-good'],
  ['avenc_aac', 'gstreamer1.0-libav'],
];

async function which(cmd: string): Promise<string | null> {
  try {
    const { stdout } = await run('sh', ['-c', `command -v ${cmd}`]);
    return stdout.trim() || null;
  } catch {
    return null;
  }
}

async function version(cmd: string, args: string[]): Promise<string> {
  try {
    const { stdout, stderr } = await run(cmd, args, { timeout: 10_000 });
    return (stdout || stderr).split('\n')[0]?.trim() ?? '';
  } catch (err) {
    return `(could not run: ${(err as Error).message.split('\n')[0]})`;
  }
}

function loads(mod: string): string | null {
  try {
    require(mod);
    return null;
  } catch (err) {
    return (err as Error).message.split('\n')[0] ?? 'failed to load';
  }
}

/** Sends a STUN Binding request (RFC 8489) and resolves true when an answer comes back in time. */
function stunAnswers(host: string, port: number, timeoutMs = 2000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.close();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    const req = Buffer.alloc(20);
    req.writeUInt16BE(0x0001, 0); // Binding request, no attributes
    req.writeUInt32BE(0x2112a442, 4);
    randomBytes(12).copy(req, 8);
    socket.once('message', (m) => done(m.length >= 20 && m.readUInt32BE(4) === 0x2112a442 && m.subarray(8, 20).equals(req.subarray(8, 20))));
    socket.once('error', () => done(false));
    socket.send(req, port, host);
  });
}

/** Binds a UDP socket to `port` on `address`; resolves with the error text, or null when it binds. */
function bindsUdp(port: number, address: string): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = createSocket(address.includes(':') ? 'udp6' : 'udp4');
    socket.once('error', (err) => {
      socket.close();
      resolve(err.message);
    });
    socket.bind(port, address, () => {
      socket.close();
      resolve(null);
    });
  });
}

/** The live path's network settings as clients will meet them (docs/operations.md, "Ports and NAT"). */
async function networkChecks(cfg: Pick<Config, 'webrtc' | 'mediaCapacity' | 'media' | 'cascadeOriginViewers' | 'redisUrl'>, add: (name: string, need: CheckNeed, ok: boolean, detail: string, fix: string | null) => void): Promise<void> {
  const rtc = cfg.webrtc;
  const m = cfg.media;
  // What this node admits, as the operator set it or as derived from the cores (docs/operations.md, "Limits").
  add(
    'capacity',
    'media',
    true,
    `${cfg.mediaCapacity} streams with a publisher (MEDIA_CAPACITY); ${m.maxViewersPerNode} connected viewers (WHEP_VIEWERS_PER_NODE), ${m.maxViewersPerStream} of one stream (WHEP_VIEWERS_PER_STREAM); ` +
      `per client address ${m.whepPerAddressPerMinute} WHEP a minute and ${m.maxPendingViewersPerAddress} connecting at once; per stream ${m.whepPerPlaybackPerMinute} WHEP a minute and ${m.maxPendingViewersPerStream} connecting at once` +
      // Scale-out only: the cascade needs other media nodes to relay a stream.
      (cfg.redisUrl ? `; a stream's viewers past ${cfg.cascadeOriginViewers} on its own node go to other media nodes that relay it (CASCADE_ORIGIN_VIEWERS), which stop ${m.edgeLingerMs} ms after their last viewer (EDGE_LINGER_MS)` : '') +
      // Each rendition is one more x264 encode per stream while someone may need it (docs/performance.md, "Renditions").
      `; renditions beside the full encode: ${m.renditions.length === 0 ? 'none' : m.renditions.map((r) => `${r.name} (${r.scale} of the size, ${r.bitrateKbps} kb/s)`).join(', ')} (RENDITIONS)`,
    null,
  );
  const local = new Set(Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address)));
  if (rtc.interfaces) {
    const missing = rtc.interfaces.filter((a) => !local.has(a));
    add('WEBRTC_INTERFACES', 'media', missing.length === 0, missing.length ? `not on this machine: ${missing.join(', ')}` : rtc.interfaces.join(', '), 'list addresses of this machine (`ip -brief address`), or unset it to use every interface');
  }
  const publicLocal = [...local].filter((a) => !/^(127\.|10\.|192\.168\.|172\.(1[6-9]|2\d|3[01])\.|169\.254\.|::1$|fe80:|f[cd])/i.test(a));
  add(
    'announced addresses',
    'media',
    true,
    rtc.announcedAddresses.length > 0 ? `${rtc.announcedAddresses.join(', ')} (offered with every candidate's port)` : publicLocal.length > 0 ? `none; public interface addresses: ${publicLocal.join(', ')}` : 'none, and no public address on any interface: clients outside this network need WEBRTC_ANNOUNCED_ADDRESSES (or TURN)',
    null,
  );
  if (rtc.udpPortRange) {
    const [lo, hi] = rtc.udpPortRange;
    const size = hi - lo + 1;
    // Every WebRTC session, publisher or WHEP viewer, holds one port of the range: a range smaller
    // than both caps together turns viewers the caps admit into ICE failures instead of a clean 503.
    const sessions = cfg.mediaCapacity + m.maxViewersPerNode;
    add(
      'WEBRTC_UDP_PORT_RANGE',
      'media',
      size >= sessions,
      `${lo}-${hi}: ${size} WebRTC sessions (publishers + viewers) at once; capacity ${cfg.mediaCapacity} streams and ${m.maxViewersPerNode} viewers`,
      `widen it to at least MEDIA_CAPACITY + WHEP_VIEWERS_PER_NODE (${sessions}) ports, or lower WHEP_VIEWERS_PER_NODE to ${Math.max(0, size - cfg.mediaCapacity)}`,
    );
    let bound: string | null = 'no port tried';
    const address = rtc.interfaces?.[0] ?? '0.0.0.0';
    for (let p = lo; p <= Math.min(hi, lo + 4) && bound !== null; p++) bound = await bindsUdp(p, address);
    add('UDP ports bind', 'media', bound === null, bound === null ? `a socket binds in ${lo}-${hi} on ${address}` : bound, 'free the range (another server running?) or choose another WEBRTC_UDP_PORT_RANGE');
  } else {
    add('WEBRTC_UDP_PORT_RANGE', 'media', true, 'any ephemeral port: fine on an open host; behind a firewall or in Docker set a range and open it', null);
  }
  const cap = udpRecvBufferCap();
  if (cap !== null) {
    const asked = rtc.udpRecvBufferBytes;
    add(
      'UDP receive buffers',
      'media',
      cap >= asked,
      `net.core.rmem_max ${cap} bytes; each publisher's socket asks ${asked} (WEBRTC_UDP_BUFFER_BYTES)`,
      `sysctl -w net.core.rmem_max=${asked} (keep it in /etc/sysctl.d/): below it a busy node drops publisher packets, mostly key frames`,
    );
  }
  for (const url of rtc.turn?.urls ?? []) {
    const m = /^turns?:([^:?]+)(?::(\d+))?/.exec(url);
    const ok = m ? await stunAnswers(m[1] as string, Number(m[2] ?? 3478)) : false;
    add(`TURN ${url}`, 'media', ok, ok ? 'answers STUN' : 'no answer to a STUN binding request in 2 s', 'check the TURN server runs and its port is reachable from this machine');
  }
}

export async function runDoctor(opts: { dataDir: string; config?: Pick<Config, 'webrtc' | 'mediaCapacity' | 'media' | 'cascadeOriginViewers' | 'redisUrl'> }): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  const add = (name: string, need: CheckNeed, ok: boolean, detail: string, fix: string | null) => out.push({ name, need, ok, detail, fix: ok ? null : fix });

  const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
  add('node', 'required', major === 20 ? minor >= 19 : major >= 22, `v${process.versions.node}`, 'install Node.js 20.19+ (or 22+)');

  try {
    mkdirSync(opts.dataDir, { recursive: true });
    accessSync(opts.dataDir, constants.W_OK);
    add('data dir', 'required', true, opts.dataDir, null);
  } catch (err) {
    add('data dir', 'required', false, `${opts.dataDir}: ${(err as Error).message}`, 'set DATA_DIR to a writable directory');
  }

  const sqlite = loads('better-sqlite3');
  add('better-sqlite3', 'required', sqlite === null, sqlite ?? 'loads', 'run `npm ci` (it compiles better-sqlite3; needs python3, make, g++)');

  for (const [cmd, need, pkg] of [
    ['ffmpeg', 'media', 'ffmpeg'], // RTMP push, clips and recordings (ffmpeg -c copy); images are decoded in-process (sharp)
    ['ffprobe', 'tests', 'ffmpeg'],
    ['lame', 'songs', 'lame'],
    ['redis-server', 'tests', 'redis-server'],
    ['chromium', 'tests', 'chromium'],
    ['gst-inspect-1.0', 'media', 'gstreamer1.0-tools'],
  ] as const) {
    const path = await which(cmd);
    add(cmd, need, path !== null, path ? `${path} ${await version(cmd, cmd === 'chromium' ? ['--version'] : cmd === 'redis-server' || cmd === 'lame' ? ['--version'] : cmd === 'gst-inspect-1.0' ? ['--version'] : ['-version'])}` : 'not found', APT(pkg));
  }

  if (await which('gst-inspect-1.0')) {
    const missing: string[] = [];
    const pkgs = new Set<string>();
    for (const [el, pkg] of GST_ELEMENTS) {
      try {
        await run('gst-inspect-1.0', ['--exists', el], { timeout: 10_000 });
      } catch {
        missing.push(el);
        pkgs.add(pkg);
      }
    }
    add('gstreamer elements', 'media', missing.length === 0, missing.length ? `missing: ${missing.join(', ')}` : `${GST_ELEMENTS.length} present`, APT([...pkgs].join(' ')));
  }

  const gst = loads('../media/gst/build/Release/reverie_gst.node');
  add('gstreamer addon', 'media', gst === null, gst ?? 'loads', `${APT('libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev')} && npm run build:gst`);

  const ort = loads('onnxruntime-node');
  add('onnxruntime-node', 'media', ort === null, ort ?? 'loads (cpu provider)', 'npm ci with `onnxruntime-node-install=skip` in .npmrc (already in the repo)');
  if (opts.config) await networkChecks(opts.config, add);
  return out;
}

export function formatDoctor(results: CheckResult[]): string {
  const lines = results.map((r) => `${r.ok ? 'ok  ' : 'MISS'}  ${r.name.padEnd(22)} [${r.need}] ${r.detail}${r.fix ? `\n      fix: ${r.fix}` : ''}`);
  const bad = results.filter((r) => !r.ok);
  lines.push('', bad.length === 0 ? 'Everything Reverie needs is here.' : `${bad.length} missing (${bad.map((b) => b.name).join(', ')}).`);
  return lines.join('\n');
}
