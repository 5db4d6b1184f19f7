/**
 * A TURN Allocate (RFC 8656 §7.1) over UDP with long-term credentials, written out so tests can
 * ask a real TURN server whether it accepts a credential: the first request gets 401 with REALM
 * and NONCE, the second carries USERNAME, REALM, NONCE and MESSAGE-INTEGRITY
 * (HMAC-SHA1 keyed with MD5(username:realm:password), RFC 8489 §14.5, §9.2.2). Optionally a
 * Refresh of that allocation later (RFC 8656 §8: same 5-tuple, same credential), to see whether
 * the server re-checks a credential that expired meanwhile.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';

const MAGIC = 0x2112a442;
const ALLOCATE_REQUEST = 0x0003;
const ALLOCATE_SUCCESS = 0x0103;
const REFRESH_REQUEST = 0x0004;
const REFRESH_SUCCESS = 0x0104;
const ATTR = { LIFETIME: 0x000d, USERNAME: 0x0006, MESSAGE_INTEGRITY: 0x0008, ERROR_CODE: 0x0009, REALM: 0x0014, NONCE: 0x0015, XOR_RELAYED_ADDRESS: 0x0016, REQUESTED_TRANSPORT: 0x0019 } as const;

export interface AllocateResult {
  ok: boolean;
  /** STUN error code when refused (401 Unauthorized, 438 Stale Nonce…). */
  code?: number;
  reason?: string;
  /** The relayed transport address, when allocated. */
  relayed?: string;
  /** The Refresh's outcome, when one was asked for and the Allocate succeeded. */
  refreshed?: { ok: boolean; code?: number; reason?: string };
}

function attribute(type: number, value: Buffer): Buffer {
  const head = Buffer.alloc(4);
  head.writeUInt16BE(type, 0);
  head.writeUInt16BE(value.length, 2);
  return Buffer.concat([head, value, Buffer.alloc((4 - (value.length % 4)) % 4)]);
}

function message(type: number, txid: Buffer, attrs: Buffer[], integrityKey?: Buffer): Buffer {
  const body = Buffer.concat(attrs);
  const header = Buffer.alloc(20);
  header.writeUInt16BE(type, 0);
  header.writeUInt32BE(MAGIC, 4);
  txid.copy(header, 8);
  if (!integrityKey) {
    header.writeUInt16BE(body.length, 2);
    return Buffer.concat([header, body]);
  }
  // MESSAGE-INTEGRITY covers the message up to itself, with the length already counting it.
  header.writeUInt16BE(body.length + 24, 2);
  const mac = createHmac('sha1', integrityKey).update(Buffer.concat([header, body])).digest();
  return Buffer.concat([header, body, attribute(ATTR.MESSAGE_INTEGRITY, mac)]);
}

function parse(buf: Buffer): { type: number; attrs: Map<number, Buffer> } {
  const attrs = new Map<number, Buffer>();
  const length = buf.readUInt16BE(2);
  for (let i = 20; i + 4 <= 20 + length && i + 4 <= buf.length; ) {
    const t = buf.readUInt16BE(i);
    const l = buf.readUInt16BE(i + 2);
    attrs.set(t, buf.subarray(i + 4, i + 4 + l));
    i += 4 + l + ((4 - (l % 4)) % 4);
  }
  return { type: buf.readUInt16BE(0), attrs };
}

function errorOf(attrs: Map<number, Buffer>): { code: number; reason: string } | null {
  const e = attrs.get(ATTR.ERROR_CODE);
  if (!e || e.length < 4) return null;
  return { code: ((e[2] as number) & 0x07) * 100 + (e[3] as number), reason: e.subarray(4).toString() };
}

/**
 * `refreshAfter`: once allocated, awaits it, then refreshes the allocation (LIFETIME 600 s) with
 * the same credential (a fresh nonce once if the server calls it stale).
 */
export async function turnAllocate(
  server: { host: string; port: number },
  username: string,
  password: string,
  timeoutMs = 5_000,
  refreshAfter?: () => Promise<unknown>,
): Promise<AllocateResult> {
  const socket = createSocket('udp4');
  const ask = (msg: Buffer) =>
    new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer from ${server.host}:${server.port} in ${timeoutMs} ms`)), timeoutMs);
      socket.once('message', (m) => {
        clearTimeout(timer);
        resolve(m);
      });
      socket.send(msg, server.port, server.host);
    });
  const transport = attribute(ATTR.REQUESTED_TRANSPORT, Buffer.from([17, 0, 0, 0]));
  try {
    const first = parse(await ask(message(ALLOCATE_REQUEST, randomBytes(12), [transport])));
    const realm = first.attrs.get(ATTR.REALM);
    const nonce = first.attrs.get(ATTR.NONCE);
    if (!realm || !nonce) return { ok: false, ...(errorOf(first.attrs) ?? { code: 0, reason: 'no realm/nonce challenge' }) };
    const key = createHash('md5').update(`${username}:${realm.toString()}:${password}`).digest();
    const second = parse(
      await ask(message(ALLOCATE_REQUEST, randomBytes(12), [transport, attribute(ATTR.USERNAME, Buffer.from(username)), attribute(ATTR.REALM, realm), attribute(ATTR.NONCE, nonce)], key)),
    );
    if (second.type !== ALLOCATE_SUCCESS) return { ok: false, ...(errorOf(second.attrs) ?? { code: 0, reason: `message type ${second.type}` }) };
    const x = second.attrs.get(ATTR.XOR_RELAYED_ADDRESS);
    const relayed = x && x.length >= 8 ? `${[0, 1, 2, 3].map((i) => (x[4 + i] as number) ^ ((MAGIC >>> (24 - 8 * i)) & 0xff)).join('.')}:${x.readUInt16BE(2) ^ (MAGIC >>> 16)}` : undefined;
    if (!refreshAfter) return { ok: true, ...(relayed ? { relayed } : {}) };
    await refreshAfter();
    const lifetime = Buffer.alloc(4);
    lifetime.writeUInt32BE(600);
    let n = nonce;
    let refreshed: AllocateResult['refreshed'] = { ok: false };
    for (let attempt = 0; attempt < 2; attempt++) {
      const reply = parse(await ask(message(REFRESH_REQUEST, randomBytes(12), [attribute(ATTR.LIFETIME, lifetime), attribute(ATTR.USERNAME, Buffer.from(username)), attribute(ATTR.REALM, realm), attribute(ATTR.NONCE, n)], key)));
      const err = errorOf(reply.attrs);
      refreshed = reply.type === REFRESH_SUCCESS ? { ok: true } : { ok: false, ...(err ?? { code: 0, reason: `message type ${reply.type}` }) };
      const fresh = reply.attrs.get(ATTR.NONCE);
      if (err?.code !== 438 || !fresh) break;
      n = fresh; // 438 Stale Nonce: once more with the new one
    }
    return { ok: true, ...(relayed ? { relayed } : {}), refreshed };
  } finally {
    socket.close();
  }
}
