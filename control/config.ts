/**
 * The process configuration: read once from the environment (and CLI flags, which win), validated
 * with zod, frozen. Invalid config stops start-up with a message naming the variable.
 * The README's configuration table lists the same variables; a test keeps the two in step.
 */
import { isIP } from 'node:net';
import { availableParallelism } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import { DEFAULT_IMAGE_LIMITS, type ImageLimits } from '../images/index.ts';
import { DEFAULT_MEDIA_SETTINGS, DEFAULT_UDP_RECV_BUFFER_BYTES, type MediaSettings, type RenditionSpec } from '../media/index.ts';
import { ADMISSION_DEFAULTS, DELETED_STATUS_TTL_MS, type AdmissionSettings } from '../streams/index.ts';
import { ATTEMPTS_KEPT, OPERATIONAL_EVENT_DEFAULTS, REDELIVERY_DEFAULTS, WEBHOOK_SERVICE_DEFAULTS } from '../webhooks/index.ts';

/** The roles a process can run (design.md "One codebase, three roles"). */
export type Role = 'api' | 'media' | 'worker';
export const ROLES = ['api', 'media', 'worker'] as const satisfies readonly Role[];

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off', ''])
  .transform((v) => ['1', 'true', 'yes', 'on'].includes(v));

/** A comma-separated list (spaces around items allowed, empty items dropped). */
const list = (item: z.ZodType<string, string>, what: string) =>
  z
    .string()
    .transform((s) => s.split(',').map((x) => x.trim()).filter(Boolean))
    .pipe(z.array(item).min(1, `needs at least one ${what}`));
const ipAddress = z.string().refine((a) => isIP(a) !== 0, 'must be IP addresses (e.g. 203.0.113.7 or 2001:db8::7)');
/** An IP address or a CIDR block (`10.0.0.0/8`, `2001:db8::/32`): the prefix fits the address family. */
const ipOrCidr = z.string().refine((s) => {
  const [address = '', prefix, ...rest] = s.split('/');
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  return prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128));
}, 'must be IP addresses or CIDR blocks (e.g. 10.0.0.5, 10.0.0.0/8, 2001:db8::/32)');

/**
 * Streams per core of a node's default capacity. Measured (docs/performance.md, capacity
 * benchmark): a 512² 30 fps stream with nothing to process costs the node ≈ 0.08 core, and one
 * with a canny processor ≈ 0.2; four per core leaves room for processors and for the OS.
 * Operators with GPUs set MEDIA_CAPACITY to what their GPU holds.
 */
export const STREAMS_PER_CORE = 4;

/**
 * Connected WHEP viewers per core of a node's default viewer capacity. Measured (docs/performance.md,
 * "Viewers"): fan-out costs the node ≈ 1.6 ms of CPU per second per viewer at 1.5 Mb/s, ≈ 625
 * viewers per core at 100 %; 500 keeps a fifth of each core for publishers, handshakes and the OS.
 * A 2-core node carries 1,000 viewers of one stream by default.
 */
export const VIEWERS_PER_CORE = 500;

/** Environment variable → schema. Defaults live here and only here. */
export const ConfigEnvSchema = z.object({
  /** TCP port of the HTTP server. */
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  /** Interface to bind; `0.0.0.0` for every IPv4 interface. */
  HOST: z.string().min(1).default('127.0.0.1'),
  /** The URL clients reach us at (used in whip_url, download links…); default http://HOST:PORT. */
  PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional(),
  /** Where the embedded store, blobs and generated models live. */
  DATA_DIR: z.string().min(1).default('./data'),
  /** When set, state, queues and events go through Redis (scale-out). */
  REDIS_URL: z.url({ protocol: /^rediss?$/ }).optional(),
  /** Key prefix in Redis, so several deployments can share a server. */
  REDIS_PREFIX: z.string().min(1).default('rv:'),
  /** Base path of Area A (songs); includes the version. */
  MUSIC_BASE_PATH: z
    .string()
    .regex(/^\/[A-Za-z0-9._~\-/]*[A-Za-z0-9._~-]$/, 'must start with / and not end with /')
    .default('/music/v1'),
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
  /** Comma-separated roles this process runs; all three is the embedded default. */
  ROLES: z
    .string()
    .default('api,media,worker')
    .transform((s) => s.split(',').map((r) => r.trim()).filter(Boolean))
    .pipe(z.array(z.enum(ROLES)).min(1)),
  /** Largest request body accepted, in bytes (1 MiB). */
  BODY_LIMIT: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(1024 * 1024),
  /** Directory of ONNX models, one folder per model_id (docs/models.md). Default DATA_DIR/models. */
  MODELS_DIR: z.string().min(1).optional(),
  /**
   * Test and local-development switch: webhook and style-image fetches may reach loopback.
   * Off by default; the server logs a warning when it is on.
   */
  ALLOW_LOOPBACK_TARGETS: bool.default(false),
  /** PEM file of an extra CA trusted for webhook deliveries (with the switch above, for tests). */
  EXTRA_CA_FILE: z.string().min(1).optional(),
  /**
   * Webhook deliver jobs leased per store round trip (capped at the 16 sends in flight): one lease
   * transaction per batch instead of per send. Default 16; 1 leases one job per free slot.
   */
  WEBHOOK_LEASE_BATCH: z.coerce.number().int().min(1).max(16).default(16),
  /**
   * ms a `stream.ended` waiting for its `stream.started` (at the same endpoint, or to be fanned
   * out) waits before looking again. Default 250: the delay it may add after the started one lands.
   */
  WEBHOOK_ORDER_RECHECK_MS: z.coerce.number().int().min(10).max(60_000).default(250),
  /**
   * Write tiny random-weight demo models for every model_id that has no real export under
   * MODELS_DIR (the embedded default does, so the live path runs end to end without weights).
   * Status, logs and the API say plainly when a stream runs on a demo model.
   * Default: on when MODELS_DIR is unset (models live under DATA_DIR), off when it is set, so demo
   * models are never written into an operator's production model volume unless asked for.
   */
  DEMO_MODELS: bool.optional(),
  /**
   * Seconds a SIGTERM/SIGINT drain may take (readiness off, listeners closed, streams ended, song
   * renders and deliveries handed back) before the process exits anyway with status 1. Keep it
   * below the orchestrator's kill grace period (Kubernetes: 30 s by default).
   */
  DRAIN_TIMEOUT: z.coerce.number().min(1).max(3600).default(25),
  /** Secret for signed download links; default: generated once and kept in DATA_DIR. */
  LINK_SIGNING_SECRET: z.string().min(32).optional(),
  /** When set, /metrics answers only `Authorization: Bearer <token>` (it names every live stream). */
  METRICS_TOKEN: z.string().min(16).optional(),
  /** Song render worker threads in this process (0 = no renderer here → 503 when none anywhere). */
  RENDER_WORKERS: z.coerce.number().int().min(0).max(64).default(1),
  /** Live streams this media node holds with a publisher at most; default STREAMS_PER_CORE × cores. 0: an edge only (it relays other nodes' streams, decision 0030). */
  MEDIA_CAPACITY: z.coerce.number().int().min(0).max(10_000).optional(),
  /**
   * Keyless WHEP viewers waiting for a stream that has no publisher take no node capacity
   * (playback ids are public); these bound what they hold instead (media settings, defaults and
   * reasons in media/settings.ts). Viewer sessions of one such stream, connecting or connected.
   */
  WHEP_WAITING_VIEWERS_PER_STREAM: z.coerce.number().int().min(1).max(10_000).default(DEFAULT_MEDIA_SETTINGS.maxWaitingViewersPerStream),
  /** Streams of one account without a publisher that viewers may wait for on one node at once. */
  WHEP_WAITING_STREAMS_PER_ACCOUNT: z.coerce.number().int().min(1).max(10_000).default(DEFAULT_MEDIA_SETTINGS.maxWaitingStreamsPerAccount),
  /** Slate encodes (one x264 encode of a still at the slate's rate each) of streams that never had a publisher, per node; 0: none. */
  WHEP_WAITING_SLATES: z.coerce.number().int().min(0).max(10_000).default(DEFAULT_MEDIA_SETTINGS.maxWaitingSlates),
  /**
   * ms of a publisher's audio a stream's soundtrack mix holds before it takes it (again after it
   * ran dry): absorbs Opus packets that arrive unevenly, and delays the publisher's audio on
   * outputs with a soundtrack by as much. Default 60 (three 20 ms packets).
   */
  /**
   * LL-HLS part target, ms (PART-TARGET). Default 200. 100 brings hls.js on loopback from ≈ 0.8 s
   * to ≈ 0.6 s behind the publisher, for twice the part and playlist requests per player
   * (docs/performance.md, "Outputs").
   */
  HLS_PART_TARGET_MS: z.coerce.number().int().min(100).max(1000).default(DEFAULT_MEDIA_SETTINGS.hlsPartTargetMs),
  /**
   * Smaller encodes of each stream beside the full one, `name=scale@kbps` comma-separated (scale
   * 0.1–0.9 of each side, 50–20000 kb/s), or `none`. Default `half=0.5@300`. LL-HLS offers them in
   * /hls/{playbackId}/master.m3u8; each costs one scaled x264 encode per live stream.
   */
  RENDITIONS: z
    .string()
    .default(DEFAULT_MEDIA_SETTINGS.renditions.map((r) => `${r.name}=${r.scale}@${r.bitrateKbps}`).join(','))
    .transform((v, ctx) => {
      if (v.trim() === 'none') return [];
      const out: RenditionSpec[] = [];
      for (const item of v.split(',').map((x) => x.trim())) {
        const m = /^([a-z0-9-]{1,16})=(0?\.\d+)@(\d+)$/.exec(item);
        const scale = m ? Number(m[2]) : NaN;
        const kbps = m ? Number(m[3]) : NaN;
        if (!m || !(scale >= 0.1 && scale <= 0.9) || !(kbps >= 50 && kbps <= 20_000) || out.some((r) => r.name === m[1]) || ['index', 'plain', 'master'].includes(m[1]!)) {
          ctx.addIssue({ code: 'custom', message: `"${item}" is not name=scale@kbps (name [a-z0-9-] up to 16, unique; scale 0.1–0.9; 50–20000 kb/s), or "none"` });
          return z.NEVER;
        }
        out.push({ name: m[1]!, scale, bitrateKbps: kbps });
      }
      return out;
    }),
  /**
   * LL-HLS PART-HOLD-BACK, ms (players' target latency behind the live edge); default 3 × the
   * part target. Behind nginx's cache 1100: its lock hands a part to waiting players up to
   * 500 ms late (docs/operations.md). At least 2 parts (the spec's minimum; checked below).
   */
  HLS_PART_HOLD_BACK_MS: z.coerce.number().int().min(200).max(30_000).optional(),
  SOUNDTRACK_JITTER_MS: z.coerce.number().int().min(0).max(1000).default(DEFAULT_MEDIA_SETTINGS.soundtrackJitterMs),
  /**
   * Longest a frame of a stream whose params follow the publisher's audio waits for the audio of
   * its capture time, ms: an Opus packet leaves up to 20 ms after the sound it holds; without the
   * wait the sound changes the next frame. Adds up to this much latency to those streams only.
   * Default 40.
   */
  AUDIO_MAPPING_WAIT_MS: z.coerce.number().int().min(0).max(200).default(DEFAULT_MEDIA_SETTINGS.audioMappingWaitMs),
  /**
   * Connected WHEP viewers of all streams on this media node (beyond → 503: the node is full);
   * default VIEWERS_PER_CORE × cores, from the measured per-viewer cost.
   */
  WHEP_VIEWERS_PER_NODE: z.coerce.number().int().min(1).max(1_000_000).optional(),
  /** Connected WHEP viewers of one stream on this media node (beyond → 503); default WHEP_VIEWERS_PER_NODE: one stream may take the whole node. */
  WHEP_VIEWERS_PER_STREAM: z.coerce.number().int().min(1).max(1_000_000).optional(),
  /** WHEP viewer sessions of one stream still connecting (ICE + DTLS) at once (beyond → 503): bounds the handshakes a burst costs. */
  WHEP_PENDING_VIEWERS_PER_STREAM: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_MEDIA_SETTINGS.maxPendingViewersPerStream),
  /** WHEP viewer sessions from one client address still connecting, across streams (beyond → 429 + Retry-After). */
  WHEP_PENDING_VIEWERS_PER_ADDRESS: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_MEDIA_SETTINGS.maxPendingViewersPerAddress),
  /**
   * Scale-out (decision 0030): connected viewers of one stream its origin node (the node with its
   * publisher) carries before the api places new viewers on other media nodes, which relay the
   * stream (edges). 0: every viewer goes to an edge while one has room. Default 250.
   */
  CASCADE_ORIGIN_VIEWERS: z.coerce.number().int().min(0).max(1_000_000).default(250),
  /** ms an edge keeps pulling a stream after its last viewer there left (a reload finds it running). Default 5000. */
  EDGE_LINGER_MS: z.coerce.number().int().min(0).max(600_000).default(DEFAULT_MEDIA_SETTINGS.edgeLingerMs),
  /** WHEP POSTs per client address a minute (beyond → 429 + Retry-After, when the window frees). Raise it for audiences behind one NAT. */
  WHEP_PER_ADDRESS_PER_MINUTE: z.coerce.number().int().min(1).max(1_000_000).default(DEFAULT_MEDIA_SETTINGS.whepPerAddressPerMinute),
  /** WHEP POSTs per playback id a minute from all addresses (beyond → 429 + Retry-After): how fast one stream's audience may join. */
  WHEP_PER_PLAYBACK_PER_MINUTE: z.coerce.number().int().min(1).max(1_000_000).default(DEFAULT_MEDIA_SETTINGS.whepPerPlaybackPerMinute),
  /** Caps every account's recordings at this many bytes (below the plan's limit; docs/api.md "Recordings"). */
  RECORDING_MAX_BYTES: z.coerce.number().int().min(1).optional(),
  /** Caps the age of every account's recorded segments, hours (below the plan's limit). */
  RECORDING_MAX_AGE_HOURS: z.coerce.number().min(0.001).optional(),
  /**
   * Admission rules (docs/api.md "Admission"): ms an admission hook call may take before it
   * counts as a refusal (the publisher or viewer waits on it; WHIP clients give up after ≈ 10 s).
   */
  ADMISSION_HOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(10_000).default(ADMISSION_DEFAULTS.hookTimeoutMs),
  /** Seconds a hook's decision (per client and token) and a stream's rule are reused: an LL-HLS player asks ≈ 10 times a second. 0: never reused. */
  ADMISSION_CACHE_TTL: z.coerce.number().min(0).max(300).default(ADMISSION_DEFAULTS.decisionTtlMs / 1000),
  /**
   * Seconds an API key's account is reused in-process (the API's hot path then reads the store
   * once per request, not three times). A key removed from the store, or an account's plan
   * changed there, applies on every api replica within this. 0: every request reads the store.
   */
  AUTH_CACHE_TTL: z.coerce.number().min(0).max(300).default(2),
  /** Most API keys an api process keeps cached (≈ 1 KB each); past it the least recently fetched is dropped. */
  AUTH_CACHE_MAX_KEYS: z.coerce.number().int().min(1).max(10_000_000).default(100_000),
  /** Seconds a fetched JWKS of a JWT rule is used before it is fetched again. */
  ADMISSION_JWKS_CACHE_TTL: z.coerce.number().min(1).max(86_400).default(ADMISSION_DEFAULTS.jwksTtlMs / 1000),
  /** Seconds between retention sweeps of recordings (api role). */
  RECORDING_SWEEP_INTERVAL: z.coerce.number().min(0.1).max(86_400).default(60),
  /**
   * Seconds after DELETE that GET /v1/streams/{id}/status still answers OFFLINE with
   * `end_reason: deleted` (every other route of the stream is 404 at once); then 404 too. Default
   * 3600: longer than a client's poll after DELETE and the webhook retries of its `stream.ended`
   * (about 32 min); 0 answers 404 at once. At most 30 days.
   */
  DELETED_STREAM_STATUS_TTL: z.coerce.number().int().min(0).max(30 * 86_400).default(DELETED_STATUS_TTL_MS / 1000),
  /**
   * UDP ports WebRTC uses, `low-high` inclusive (one per publisher or viewer session; ICE-TCP uses
   * the same numbers over TCP). Default: any free ephemeral port. Open this range in firewalls.
   */
  WEBRTC_UDP_PORT_RANGE: z
    .string()
    .regex(/^\d{1,5}-\d{1,5}$/, 'must be low-high, e.g. 40000-40999')
    .transform((s) => s.split('-').map(Number) as [number, number])
    // At least two ports: werift (publishers) refuses a range of one, which failed every WHIP offer.
    .refine(([lo, hi]) => lo >= 1024 && hi <= 65535 && lo < hi, 'must be within 1024-65535, low < high (two ports at least)')
    .optional(),
  /**
   * Addresses clients reach this node at that are not on its interfaces (1:1 NAT, a cloud VM's
   * public IP, Docker's published ports): ICE candidates are offered on them too, same ports.
   */
  WEBRTC_ANNOUNCED_ADDRESSES: list(ipAddress, 'address').optional(),
  /** Local addresses WebRTC gathers on and advertises; default every interface. */
  WEBRTC_INTERFACES: list(ipAddress, 'address').optional(),
  /** Also offer ICE over TCP (passive candidates on the same port numbers), for clients whose UDP is blocked. */
  WEBRTC_ICE_TCP: bool.default(true),
  /**
   * Receive buffer asked for each publisher's UDP socket, bytes (SO_RCVBUF): what rides out a
   * moment the node is too busy to read packets. The kernel caps it at net.core.rmem_max; 0
   * leaves the kernel's default (net.core.rmem_default).
   */
  WEBRTC_UDP_BUFFER_BYTES: z.coerce
    .number()
    .int()
    .refine((n) => n === 0 || (n >= 65_536 && n <= 256 * 1024 * 1024), 'must be 0 (the kernel default) or 65536 to 268435456 bytes')
    .default(DEFAULT_UDP_RECV_BUFFER_BYTES),
  /**
   * ms a publisher's packets after a gap wait for the gap's retransmission, at most. The wait is
   * sized by the measured round trip (two NACK retries fit) from 100 ms up to this; beyond it the
   * packet is given up (the frames after it wait for a key frame). 500: two retries at 150 ms RTT.
   */
  WHIP_REORDER_WAIT_MAX_MS: z.coerce.number().int().min(20).max(5_000).default(DEFAULT_MEDIA_SETTINGS.jitterMaxLatencyMs),
  /** NACKs the node sends for one lost publisher packet at most, a round trip apart. Default 5. */
  WHIP_NACK_MAX_RETRIES: z.coerce.number().int().min(0).max(50).default(DEFAULT_MEDIA_SETTINGS.nackMaxRetries),
  /**
   * Percent of a publisher's received bytes the node's NACKs may ask for again, at most: bounds a
   * retransmission storm on a lossy link. Default 25 (repairs 3 % loss with room to spare).
   */
  WHIP_NACK_MAX_BITRATE_PCT: z.coerce.number().min(0).max(100).default(DEFAULT_MEDIA_SETTINGS.nackMaxBitrateShare * 100),
  /** STUN servers offered to WHIP/WHEP clients in `Link` headers (e.g. `stun:stun.example.com:3478`). */
  STUN_URLS: list(z.string().regex(/^stuns?:[^\s<>",]+$/, 'must be stun: or stuns: URLs'), 'URL').optional(),
  /** TURN servers offered to WHIP/WHEP clients, with per-session credentials made from TURN_SECRET. */
  TURN_URLS: list(z.string().regex(/^turns?:[^\s<>",]+$/, 'must be turn: or turns: URLs'), 'URL').optional(),
  /** The TURN server's shared secret (coturn `static-auth-secret` with `use-auth-secret`). */
  TURN_SECRET: z.string().min(16, 'must be at least 16 characters').optional(),
  /**
   * Seconds a publisher's (WHIP) TURN credential may open allocations. Default 86 400 (a day, the
   * TURN REST draft's advice): publishers hold the stream key and may re-allocate on a reconnect.
   */
  TURN_CREDENTIAL_TTL: z.coerce.number().int().min(60).max(7 * 86_400).default(86_400),
  /**
   * Reverse proxies (TLS terminators, load balancers) whose `X-Forwarded-For` is believed, as
   * addresses or CIDR blocks. A request from one of them counts as coming from the address the
   * proxy appended, walking the header right to left past every trusted hop; that address is what
   * the per-address limits (WHIP/WHEP POSTs, viewers still connecting) count and what request logs
   * record. Default: none — every request counts as its TCP peer's, and the header is ignored, so a
   * client cannot choose its own address. RFC 7239 `Forwarded` is never read (nginx, HAProxy,
   * Caddy and the cloud load balancers all send X-Forwarded-For).
   */
  TRUSTED_PROXIES: list(ipOrCidr, 'address').optional(),
  // Client images (slate images, IP-Adapter style images), decoded in-process (images/ImageLimits.ts says why each default).
  /** Largest image a client may send, bytes (5 MiB); also what its PNG text/ICC chunks may inflate to. */
  IMAGE_MAX_BYTES: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(DEFAULT_IMAGE_LIMITS.maxBytes),
  /** Largest image, pixels (4096² = 16777216), refused from the header; 8192² at most (≈ 256 MB of RGBA). */
  IMAGE_MAX_PIXELS: z.coerce.number().int().min(64 * 64).max(8192 * 8192).default(DEFAULT_IMAGE_LIMITS.maxPixels),
  /** Image decodes at once per process (2); each may hold IMAGE_MAX_PIXELS × 4 bytes and a core. */
  IMAGE_DECODE_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(DEFAULT_IMAGE_LIMITS.concurrency),
  /** Image decodes waiting for a slot (8); beyond, 503 + Retry-After. 0: never wait. */
  IMAGE_DECODE_QUEUE: z.coerce.number().int().min(0).max(1024).default(DEFAULT_IMAGE_LIMITS.queue),
  /** Seconds one image decode may take (2; whole seconds, libvips' unit). */
  IMAGE_DECODE_TIMEOUT: z.coerce.number().int().min(1).max(60).default(DEFAULT_IMAGE_LIMITS.timeoutS),
  /**
   * Seconds a viewer's (WHEP, keyless) TURN credential may open allocations. Default 300: a browser
   * allocates within seconds of the answer, and coturn checks the expiry only on Allocate (refreshes
   * of an existing allocation use the key it cached), so long viewing keeps its relay; a credential
   * copied from a viewer's page or seen on the wire opens relays for minutes, not a day.
   */
  TURN_VIEWER_CREDENTIAL_TTL: z.coerce.number().int().min(30).max(86_400).default(300),
  /**
   * Control WebSockets open at once on one stream, per api process. A show controller keeps one,
   * a page or a monitor a few more; beyond it the upgrade answers 429 STREAMS/TOO_MANY_SOCKETS.
   */
  CONTROL_SOCKETS_PER_STREAM: z.coerce.number().int().min(1).max(10_000).default(16),
  /**
   * Control WebSockets open at once per account, every stream together, per api process: room
   * for two per live stream of the largest plan (50 streams), not for thousands.
   */
  CONTROL_SOCKETS_PER_ACCOUNT: z.coerce.number().int().min(1).max(100_000).default(100),
  /**
   * Largest control message, bytes (a bigger one closes the socket with 1009). The largest real
   * one is a full params update: a 16-entry prompt list at 2 000 characters each is 96 KB even in
   * 3-byte UTF-8; bigger params go through PATCH (BODY_LIMIT). 256 KiB.
   */
  CONTROL_MAX_MESSAGE_BYTES: z.coerce.number().int().min(4096).max(64 * 1024 * 1024).default(256 * 1024),
  /**
   * Bytes a second one control socket may send, sustained (a burst of 5 s of it, and at least one
   * largest message, passes at once); beyond it the server stops reading the socket until the
   * budget refills (TCP pushes back on the sender, the event loop does no work for it). 64 KiB/s.
   */
  CONTROL_INBOUND_BYTES_PER_S: z.coerce.number().int().min(1024).max(1024 * 1024 * 1024).default(64 * 1024),
  /**
   * Messages a second one control socket may send, sustained (a burst of 5 s of it passes at
   * once: a reconnecting client resends up to 100); throttled like the bytes. Changes also count
   * against PATCH's 300 a minute per account.
   */
  CONTROL_INBOUND_MESSAGES_PER_S: z.coerce.number().int().min(1).max(100_000).default(20),
  /**
   * Webhook resends (`POST …/deliveries/{id}/resend`) per account in any 60 s. Each is one request
   * to the account's own endpoint: 60 is clicking through deliveries by hand; beyond, 429.
   */
  WEBHOOK_RESENDS_PER_MINUTE: z.coerce.number().int().min(1).max(100_000).default(WEBHOOK_SERVICE_DEFAULTS.resendsPerMinute),
  /**
   * Webhook recover calls (`POST /v1/webhooks/{id}/recover`) per account in any 60 s. Each may
   * queue WEBHOOK_RECOVER_MAX_DELIVERIES sends: 5 pages through a large outage; beyond, 429.
   */
  WEBHOOK_RECOVERS_PER_MINUTE: z.coerce.number().int().min(1).max(10_000).default(WEBHOOK_SERVICE_DEFAULTS.recoversPerMinute),
  /**
   * Failed deliveries one recover call queues again at most (the answer's `has_more` says to call
   * again with the same window). Bounds one call's store work and the burst at the receiver. 1000.
   */
  WEBHOOK_RECOVER_MAX_DELIVERIES: z.coerce.number().int().min(1).max(100_000).default(REDELIVERY_DEFAULTS.maxPerRecover),
  /**
   * Sends kept in each webhook delivery's attempts log, newest kept (records live 14 days like
   * their delivery). 20: the 8 scheduled sends and 12 resends or recovers; older entries go.
   */
  WEBHOOK_ATTEMPTS_KEPT: z.coerce.number().int().min(8).max(1000).default(ATTEMPTS_KEPT),
  /**
   * Operational events (`webhook.delivery.exhausted`, `.endpoint.disabled`, `.endpoint.recovered`)
   * one endpoint may cause per type in any rolling hour, to the account's other endpoints; the
   * rest are dropped (logged). 10: enough to say something is wrong, never a flood. 0: none.
   */
  WEBHOOK_OPERATIONAL_EVENTS_PER_HOUR: z.coerce.number().int().min(0).max(100_000).default(OPERATIONAL_EVENT_DEFAULTS.maxPerHour),
});

export type ConfigEnv = z.input<typeof ConfigEnvSchema>;

export interface Config {
  port: number;
  host: string;
  publicUrl: string;
  dataDir: string;
  redisUrl: string | null;
  redisPrefix: string;
  musicBasePath: string;
  logLevel: (typeof LOG_LEVELS)[number];
  roles: readonly Role[];
  bodyLimit: number;
  modelsDir: string;
  allowLoopbackTargets: boolean;
  demoModels: boolean;
  /** Seconds a signal-triggered drain may take before the process exits anyway. */
  drainTimeoutS: number;
  extraCaFile: string | null;
  /** WEBHOOK_LEASE_BATCH: deliver jobs leased per store round trip. */
  webhookLeaseBatch: number;
  /** WEBHOOK_ORDER_RECHECK_MS: ms between looks of a stream.ended waiting for its stream.started. */
  webhookOrderRecheckMs: number;
  linkSigningSecret: string | null;
  metricsToken: string | null;
  renderWorkers: number;
  mediaCapacity: number;
  /** Viewers of one stream its origin node carries before the api places new ones on edges (CASCADE_ORIGIN_VIEWERS; decision 0030). */
  cascadeOriginViewers: number;
  /** Addresses and CIDR blocks whose X-Forwarded-For is believed (TRUSTED_PROXIES); empty: none. */
  trustedProxies: readonly string[];
  /** Operator settings of the media node (WHEP_*), merged over its defaults. */
  media: Readonly<
    Pick<
      MediaSettings,
      | 'maxWaitingViewersPerStream'
      | 'maxWaitingStreamsPerAccount'
      | 'maxWaitingSlates'
      | 'maxViewersPerNode'
      | 'maxViewersPerStream'
      | 'maxPendingViewersPerStream'
      | 'maxPendingViewersPerAddress'
      | 'whepPerAddressPerMinute'
      | 'whepPerPlaybackPerMinute'
      | 'jitterMaxLatencyMs'
      | 'nackMaxRetries'
      | 'nackMaxBitrateShare'
      | 'soundtrackJitterMs'
      | 'audioMappingWaitMs'
      | 'hlsPartTargetMs'
      | 'hlsPartHoldBackMs'
      | 'renditions'
      | 'edgeLingerMs'
    >
  >;
  /** Admission rules: ms (ADMISSION_HOOK_TIMEOUT_MS, ADMISSION_CACHE_TTL, ADMISSION_JWKS_CACHE_TTL). */
  admission: Readonly<AdmissionSettings>;
  /** AUTH_CACHE_TTL (ms) and AUTH_CACHE_MAX_KEYS: the in-process API key → account cache. */
  authCache: Readonly<{ ttlMs: number; maxKeys: number }>;
  /** Seconds a deleted stream's status still reads OFFLINE (DELETED_STREAM_STATUS_TTL). */
  deletedStreamStatusTtlS: number;
  recording: {
    /** Operator caps over every plan's retention limits (null: the plan's). */
    maxBytes: number | null;
    maxAgeHours: number | null;
    sweepIntervalS: number;
  };
  webrtc: {
    udpPortRange: [number, number] | null;
    announcedAddresses: string[];
    interfaces: string[] | null;
    iceTcp: boolean;
    /** Bytes (WEBRTC_UDP_BUFFER_BYTES). */
    udpRecvBufferBytes: number;
    stunUrls: string[];
    /** ttlS: publishers' credentials, viewerTtlS: viewers' (seconds). */
    turn: { urls: string[]; secret: string; ttlS: number; viewerTtlS: number } | null;
  };
  /** Caps on decoding client images (IMAGE_*). */
  images: Readonly<ImageLimits>;
  /** Limits of the control WebSockets (docs/control.md, "Limits"). */
  control: {
    socketsPerStream: number;
    socketsPerAccount: number;
    /** Bytes. */
    maxMessageBytes: number;
    /** Bytes a second, sustained, per socket. */
    inboundBytesPerS: number;
    /** Messages a second, sustained, per socket. */
    inboundMessagesPerS: number;
  };
  /** Webhook management and delivery limits (WEBHOOK_*; docs/webhooks.md). */
  webhooks: {
    /** Per account in any 60 s. */
    resendsPerMinute: number;
    recoversPerMinute: number;
    maxPerRecover: number;
    /** Entries per delivery's attempts log. */
    attemptsKept: number;
    /** Per endpoint and type in any rolling hour. */
    operationalEventsPerHour: number;
  };
}

export class ConfigError extends Error {
  constructor(
    message: string,
    readonly variable: string,
  ) {
    super(message);
    this.name = 'ConfigError';
  }
}

/**
 * Builds the frozen config from an environment map (process.env by default) and overrides
 * (CLI flags, tests). Throws ConfigError naming the first bad variable.
 */
export function loadConfig(env: Record<string, string | undefined> = process.env, overrides: Partial<ConfigEnv> = {}): Readonly<Config> {
  const input: Record<string, unknown> = {};
  for (const key of Object.keys(ConfigEnvSchema.shape)) {
    const v = env[key];
    if (v !== undefined) input[key] = v;
  }
  Object.assign(input, overrides);
  const parsed = ConfigEnvSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const variable = String(issue?.path[0] ?? 'config');
    throw new ConfigError(`invalid ${variable}: ${issue?.message ?? 'invalid value'} (got ${JSON.stringify(input[variable])})`, variable);
  }
  const e = parsed.data;
  if (e.HLS_PART_HOLD_BACK_MS !== undefined && e.HLS_PART_HOLD_BACK_MS < 2 * e.HLS_PART_TARGET_MS) {
    throw new ConfigError(`invalid HLS_PART_HOLD_BACK_MS: must be at least 2 parts (2 × HLS_PART_TARGET_MS = ${2 * e.HLS_PART_TARGET_MS}) (got ${e.HLS_PART_HOLD_BACK_MS})`, 'HLS_PART_HOLD_BACK_MS');
  }
  if (e.TURN_URLS && !e.TURN_SECRET) throw new ConfigError('invalid TURN_SECRET: TURN_URLS needs TURN_SECRET (credentials are made per session from it)', 'TURN_SECRET');
  const dataDir = isAbsolute(e.DATA_DIR) ? e.DATA_DIR : resolve(e.DATA_DIR);
  const viewersPerNode = e.WHEP_VIEWERS_PER_NODE ?? Math.max(1, VIEWERS_PER_CORE * availableParallelism());
  const hostForUrl = e.HOST === '0.0.0.0' || e.HOST === '::' ? '127.0.0.1' : e.HOST;
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    publicUrl: (e.PUBLIC_URL ?? `http://${hostForUrl.includes(':') ? `[${hostForUrl}]` : hostForUrl}:${e.PORT}`).replace(/\/$/, ''),
    dataDir,
    redisUrl: e.REDIS_URL ?? null,
    redisPrefix: e.REDIS_PREFIX,
    musicBasePath: e.MUSIC_BASE_PATH,
    logLevel: e.LOG_LEVEL,
    roles: Object.freeze([...new Set(e.ROLES)]),
    bodyLimit: e.BODY_LIMIT,
    modelsDir: e.MODELS_DIR ? resolve(e.MODELS_DIR) : resolve(dataDir, 'models'),
    allowLoopbackTargets: e.ALLOW_LOOPBACK_TARGETS,
    demoModels: e.DEMO_MODELS ?? !e.MODELS_DIR,
    drainTimeoutS: e.DRAIN_TIMEOUT,
    extraCaFile: e.EXTRA_CA_FILE ?? null,
    webhookLeaseBatch: e.WEBHOOK_LEASE_BATCH,
    webhookOrderRecheckMs: e.WEBHOOK_ORDER_RECHECK_MS,
    linkSigningSecret: e.LINK_SIGNING_SECRET ?? null,
    metricsToken: e.METRICS_TOKEN ?? null,
    renderWorkers: e.RENDER_WORKERS,
    mediaCapacity: e.MEDIA_CAPACITY ?? Math.max(1, STREAMS_PER_CORE * availableParallelism()),
    trustedProxies: Object.freeze(e.TRUSTED_PROXIES ?? []),
    media: Object.freeze({
      maxWaitingViewersPerStream: e.WHEP_WAITING_VIEWERS_PER_STREAM,
      maxWaitingStreamsPerAccount: e.WHEP_WAITING_STREAMS_PER_ACCOUNT,
      maxWaitingSlates: e.WHEP_WAITING_SLATES,
      maxViewersPerNode: viewersPerNode,
      maxViewersPerStream: e.WHEP_VIEWERS_PER_STREAM ?? viewersPerNode,
      maxPendingViewersPerStream: e.WHEP_PENDING_VIEWERS_PER_STREAM,
      maxPendingViewersPerAddress: e.WHEP_PENDING_VIEWERS_PER_ADDRESS,
      whepPerAddressPerMinute: e.WHEP_PER_ADDRESS_PER_MINUTE,
      whepPerPlaybackPerMinute: e.WHEP_PER_PLAYBACK_PER_MINUTE,
      jitterMaxLatencyMs: e.WHIP_REORDER_WAIT_MAX_MS,
      nackMaxRetries: e.WHIP_NACK_MAX_RETRIES,
      nackMaxBitrateShare: e.WHIP_NACK_MAX_BITRATE_PCT / 100,
      soundtrackJitterMs: e.SOUNDTRACK_JITTER_MS,
      hlsPartTargetMs: e.HLS_PART_TARGET_MS,
      hlsPartHoldBackMs: e.HLS_PART_HOLD_BACK_MS ?? null,
      renditions: e.RENDITIONS,
      audioMappingWaitMs: e.AUDIO_MAPPING_WAIT_MS,
      edgeLingerMs: e.EDGE_LINGER_MS,
    }),
    cascadeOriginViewers: e.CASCADE_ORIGIN_VIEWERS,
    authCache: Object.freeze({ ttlMs: Math.round(e.AUTH_CACHE_TTL * 1000), maxKeys: e.AUTH_CACHE_MAX_KEYS }),
    admission: Object.freeze({ hookTimeoutMs: e.ADMISSION_HOOK_TIMEOUT_MS, decisionTtlMs: Math.round(e.ADMISSION_CACHE_TTL * 1000), jwksTtlMs: Math.round(e.ADMISSION_JWKS_CACHE_TTL * 1000) }),
    deletedStreamStatusTtlS: e.DELETED_STREAM_STATUS_TTL,
    recording: Object.freeze({ maxBytes: e.RECORDING_MAX_BYTES ?? null, maxAgeHours: e.RECORDING_MAX_AGE_HOURS ?? null, sweepIntervalS: e.RECORDING_SWEEP_INTERVAL }),
    webrtc: Object.freeze({
      udpPortRange: e.WEBRTC_UDP_PORT_RANGE ?? null,
      announcedAddresses: e.WEBRTC_ANNOUNCED_ADDRESSES ?? [],
      interfaces: e.WEBRTC_INTERFACES ?? null,
      iceTcp: e.WEBRTC_ICE_TCP,
      udpRecvBufferBytes: e.WEBRTC_UDP_BUFFER_BYTES,
      stunUrls: e.STUN_URLS ?? [],
      turn: e.TURN_URLS && e.TURN_SECRET ? { urls: e.TURN_URLS, secret: e.TURN_SECRET, ttlS: e.TURN_CREDENTIAL_TTL, viewerTtlS: e.TURN_VIEWER_CREDENTIAL_TTL } : null,
    }),
    images: Object.freeze({ maxBytes: e.IMAGE_MAX_BYTES, maxPixels: e.IMAGE_MAX_PIXELS, concurrency: e.IMAGE_DECODE_CONCURRENCY, queue: e.IMAGE_DECODE_QUEUE, timeoutS: e.IMAGE_DECODE_TIMEOUT }),
    control: Object.freeze({
      socketsPerStream: e.CONTROL_SOCKETS_PER_STREAM,
      socketsPerAccount: e.CONTROL_SOCKETS_PER_ACCOUNT,
      maxMessageBytes: e.CONTROL_MAX_MESSAGE_BYTES,
      inboundBytesPerS: e.CONTROL_INBOUND_BYTES_PER_S,
      inboundMessagesPerS: e.CONTROL_INBOUND_MESSAGES_PER_S,
    }),
    webhooks: Object.freeze({
      resendsPerMinute: e.WEBHOOK_RESENDS_PER_MINUTE,
      recoversPerMinute: e.WEBHOOK_RECOVERS_PER_MINUTE,
      maxPerRecover: e.WEBHOOK_RECOVER_MAX_DELIVERIES,
      attemptsKept: e.WEBHOOK_ATTEMPTS_KEPT,
      operationalEventsPerHour: e.WEBHOOK_OPERATIONAL_EVENTS_PER_HOUR,
    }),
  });
}

/** Names of every variable, for the README table test. */
export const CONFIG_VARIABLES = Object.keys(ConfigEnvSchema.shape);
