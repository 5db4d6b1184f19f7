/**
 * The grammar every SDP a client sends must follow before any of it reaches werift or
 * libdatachannel: a WHIP or WHEP offer, and a trickle sdpfrag. Both libraries throw on input they
 * cannot parse (libdatachannel: `Invalid sha-256 fingerprint`; werift: a port or payload type
 * that overflows), and a throw there used to become a 500 after a stream had been made. Here
 * each line is checked against its RFC grammar in one linear pass, and the first line that breaks
 * it is named in a 400 (SdpError 'BAD_SDP').
 *
 * Strict where the libraries act on the value (fingerprints, ICE credentials, ports, payload
 * types, ids, mids, bundle groups), permissive on what they ignore (unknown attributes only need
 * the generic `a=<token>[:<value>]` shape), so real offers (Chromium, OBS/libdatachannel,
 * libwebrtc, werift) keep passing.
 */
import { SdpError } from '../errors.ts';

/** An m-section as split by Sdp.ts: the m= line's fields and its lines. */
export interface GrammarSection {
  kind: string;
  port: string;
  proto: string;
  fmts: string[];
  lines: string[];
}

/**
 * RFC 8122 §5 hash functions with their digest length, bytes. md2/md5 are left out (RFC 8122:
 * MUST NOT be used); libdatachannel and werift know the rest.
 */
const FINGERPRINT_BYTES: Record<string, number> = { 'sha-1': 20, 'sha-224': 28, 'sha-256': 32, 'sha-384': 48, 'sha-512': 64 };

/** RTP profiles an m-line may name; the first four are DTLS-SRTP, what WebRTC needs (RFC 8829 §5.1.2). */
const SECURE_PROTOS = new Set(['UDP/TLS/RTP/SAVPF', 'UDP/TLS/RTP/SAVP', 'TCP/DTLS/RTP/SAVPF', 'TCP/TLS/RTP/SAVPF', 'RTP/SAVPF', 'RTP/SAVP']);
const PLAIN_PROTOS = new Set(['RTP/AVP', 'RTP/AVPF']);

/** RFC 8866 §9 token characters. */
const TOKEN = /^[!#$%&'*+\-.0-9A-Z^_`a-z{|}~]+$/;
/** RFC 8839 §5.4 ice-char: ALPHA / DIGIT / "+" / "/". */
const ICE_CHARS = /^[A-Za-z0-9+/]+$/;
const DIRECTIONS = new Set(['sendonly', 'recvonly', 'sendrecv', 'inactive']);
/** RFC 8842 §4: what an offer's a=setup may be (holdconn is not a role werift or libdatachannel take). */
const SETUP_ROLES = new Set(['actpass', 'active', 'passive']);
const MAX_U32 = 2 ** 32 - 1;

/** `value` quoted and cut for an error message (control characters escaped by JSON). */
function quote(value: string): string {
  return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
}

function bad(what: string, message: string): never {
  throw new SdpError('BAD_SDP', `${what}: ${message}`);
}

/** A decimal integer in [min, max] (no sign, no leading +, at most 10 digits so Number is exact). */
function int(s: string | undefined, min: number, max: number): number | null {
  if (s === undefined || !/^\d{1,10}$/.test(s)) return null;
  const n = Number(s);
  return n >= min && n <= max ? n : null;
}

/** `sha-256 AB:CD:…`: a known hash function and exactly its digest length in hex pairs. */
export function checkFingerprint(value: string): string | null {
  const m = /^(\S+) (\S+)$/.exec(value);
  if (!m) return `${quote(value)} is not "<hash-function> <hex pairs>"`;
  const algorithm = (m[1] as string).toLowerCase();
  const bytes = FINGERPRINT_BYTES[algorithm];
  if (bytes === undefined) return `unsupported fingerprint hash function ${quote(m[1] as string)} (use ${Object.keys(FINGERPRINT_BYTES).join(', ')})`;
  const hex = m[2] as string;
  if (!/^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2})*$/.test(hex)) return `${algorithm} fingerprint ${quote(hex)} is not colon-separated hex pairs`;
  const got = (hex.length + 1) / 3;
  if (got !== bytes) return `${algorithm} fingerprint has ${got} bytes, needs ${bytes}`;
  return null;
}

/** RFC 8839 §5.4: ice-ufrag 4–256 ice-chars, ice-pwd 22–256. */
export function checkIceCredential(name: 'ice-ufrag' | 'ice-pwd', value: string): string | null {
  const min = name === 'ice-ufrag' ? 4 : 22;
  if (value.length < min || value.length > 256) return `a=${name} must be ${min} to 256 characters (RFC 8839), got ${value.length}`;
  if (!ICE_CHARS.test(value)) return `a=${name} may hold only letters, digits, "+" and "/" (RFC 8839)`;
  return null;
}

/**
 * RFC 8839 §5.1 candidate-attribute: `candidate:<foundation> <component> <transport> <priority>
 * <address> <port> typ <type> [raddr <a> rport <p>] *(<name> <value>)`. Null when well formed
 * (whether the address may be dialled is Sdp.refuseRemoteCandidate's business).
 */
export function checkCandidate(candidate: string): string | null {
  const f = candidate.trim().split(' ');
  const m = /^candidate:(.*)$/.exec(f[0] ?? '');
  const foundation = m?.[1] ?? '';
  if (!m || foundation.length < 1 || foundation.length > 32 || !ICE_CHARS.test(foundation)) return 'foundation must be 1 to 32 ICE characters';
  if (f.length < 8 || (f.length - 8) % 2 !== 0) return 'needs "<foundation> <component> <transport> <priority> <address> <port> typ <type>" and name/value pairs';
  if (int(f[1], 1, 256) === null) return `component ${quote(f[1] ?? '')} is not 1 to 256`;
  if (!TOKEN.test(f[2] ?? '')) return `transport ${quote(f[2] ?? '')} is not a token`;
  if (int(f[3], 1, MAX_U32) === null) return `priority ${quote(f[3] ?? '')} is not 1 to 4294967295`;
  if (!/^[A-Za-z0-9.:\-_]{1,255}$/.test(f[4] ?? '')) return `connection address ${quote(f[4] ?? '')} is not an address or host name`;
  if (int(f[5], 0, 65535) === null) return `port ${quote(f[5] ?? '')} is not 0 to 65535`;
  if (f[6] !== 'typ' || !TOKEN.test(f[7] ?? '')) return 'needs "typ <type>" after the port';
  for (let i = 8; i + 1 < f.length; i += 2) {
    const name = f[i] as string;
    const value = f[i + 1] as string;
    if (!TOKEN.test(name) || !/^[\x21-\x7e]+$/.test(value)) return `extension ${quote(`${name} ${value}`)} is not "<name> <value>"`;
    if (name === 'rport' && int(value, 0, 65535) === null) return `rport ${quote(value)} is not 0 to 65535`;
  }
  return null;
}

/** Characters no SDP line may carry (RFC 8866 §9 text excludes NUL, CR and LF; other controls only confuse). */
function hasControl(line: string): boolean {
  return /[\x00-\x08\x0a-\x1f\x7f]/.test(line);
}

/** A payload type: an integer 0–127 (RFC 3550 §5.1: 7 bits). */
function payloadType(s: string): number | null {
  return int(s, 0, 127);
}

/** Checks the value of one attribute line; `where` names the section for messages. */
function checkAttribute(line: string, where: string): void {
  const m = /^a=([^:]*)(?::(.*))?$/.exec(line) as RegExpExecArray;
  const name = m[1] as string;
  const value = m[2];
  const what = `${where} ${quote(line)}`;
  if (!TOKEN.test(name)) bad(what, 'attribute name is not a token');
  const fmt = (pt: string) => {
    const n = payloadType(pt);
    if (n === null) bad(what, `payload type ${quote(pt)} is not 0 to 127`);
  };
  switch (name) {
    case 'fingerprint': {
      const err = checkFingerprint(value ?? '');
      if (err) bad(what, err);
      return;
    }
    case 'ice-ufrag':
    case 'ice-pwd': {
      const err = checkIceCredential(name, value ?? '');
      if (err) bad(what, err);
      return;
    }
    case 'setup':
      if (!SETUP_ROLES.has(value ?? '')) bad(what, `setup role must be ${[...SETUP_ROLES].join(', ')}`);
      return;
    case 'mid':
      // RFC 8843 §15: the RTP MID header extension carries at most 16 bytes.
      if (!value || value.length > 16 || !TOKEN.test(value)) bad(what, 'mid must be a token of 1 to 16 characters (RFC 8843)');
      return;
    case 'group': {
      const [semantics = '', ...tags] = (value ?? '').split(' ');
      if (!TOKEN.test(semantics) || tags.some((g) => !TOKEN.test(g))) bad(what, 'group must be "<semantics> <mid> …"');
      return;
    }
    case 'rtpmap': {
      const r = /^(\S+) ([^/\s]+)\/(\S+?)(?:\/(\S+))?$/.exec(value ?? '');
      if (!r) bad(what, 'rtpmap must be "<payload type> <encoding>/<clock rate>[/<channels>]"');
      fmt(r[1] as string);
      if (!TOKEN.test(r[2] as string)) bad(what, 'encoding name is not a token');
      if (int(r[3], 1, MAX_U32) === null) bad(what, `clock rate ${quote(r[3] as string)} is not 1 to 4294967295 Hz`);
      if (r[4] !== undefined && int(r[4], 1, 255) === null) bad(what, `channels ${quote(r[4])} is not 1 to 255`);
      return;
    }
    case 'fmtp': {
      const r = /^(\S+) (.+)$/.exec(value ?? '');
      if (!r) bad(what, 'fmtp must be "<payload type> <parameters>"');
      fmt(r[1] as string);
      for (const kv of (r[2] as string).split(';')) {
        const [k = '', v] = kv.trim().split('=');
        if (k === 'profile-level-id' && !/^[0-9A-Fa-f]{6}$/.test(v ?? '')) bad(what, 'profile-level-id must be 6 hex digits (RFC 6184)');
        if (k === 'packetization-mode' && !/^[0-2]$/.test(v ?? '')) bad(what, 'packetization-mode must be 0, 1 or 2 (RFC 6184)');
        if (k === 'apt' && payloadType(v ?? '') === null) bad(what, 'apt must be a payload type 0 to 127');
      }
      return;
    }
    case 'rtcp-fb': {
      const r = /^(\S+) (\S+)(?: (\S+))?(?: (.+))?$/.exec(value ?? '');
      if (!r) bad(what, 'rtcp-fb must be "<payload type or *> <type> [<parameter>]"');
      if (r[1] !== '*') fmt(r[1] as string);
      if (!TOKEN.test(r[2] as string)) bad(what, 'feedback type is not a token');
      return;
    }
    case 'extmap': {
      // RFC 8285 §8: ids 1–14 (one-byte headers) and 1–255 (two-byte); 15 is reserved.
      const r = /^(\d{1,5})(?:\/(\S+))? (\S+)(?: .*)?$/.exec(value ?? '');
      if (!r) bad(what, 'extmap must be "<id>[/<direction>] <uri>"');
      const id = int(r[1], 1, 255);
      if (id === null || id === 15) bad(what, `extension id ${r[1] as string} is not 1 to 14 or 16 to 255`);
      if (r[2] !== undefined && !DIRECTIONS.has(r[2])) bad(what, `extension direction ${quote(r[2])} is not one of ${[...DIRECTIONS].join(', ')}`);
      return;
    }
    case 'ssrc': {
      const r = /^(\d{1,10}) (\S+)/.exec(value ?? '');
      if (!r || int(r[1], 0, MAX_U32) === null) bad(what, 'ssrc must be "<0 to 4294967295> <attribute>[:<value>]"');
      return;
    }
    case 'ssrc-group': {
      const [semantics = '', ...ssrcs] = (value ?? '').split(' ');
      if (!TOKEN.test(semantics) || ssrcs.length === 0 || ssrcs.some((s) => int(s, 0, MAX_U32) === null)) bad(what, 'ssrc-group must be "<semantics> <ssrc 0 to 4294967295> …"');
      return;
    }
    case 'rtcp': {
      const r = /^(\S+)(?: IN IP[46] \S+)?$/.exec(value ?? '');
      if (!r || int(r[1], 0, 65535) === null) bad(what, 'rtcp must be "<port 0 to 65535> [IN IP4|IP6 <address>]"');
      return;
    }
    case 'candidate': {
      const err = checkCandidate(`candidate:${value ?? ''}`);
      if (err) bad(what, `malformed candidate: ${err}`);
      return;
    }
    case 'msid': {
      // RFC 8830 §2: msid-id and msid-appdata are 1–64 token characters.
      if (!/^[!#$%&'*+\-.0-9A-Z^_`a-z{|}~]{1,64}( [!#$%&'*+\-.0-9A-Z^_`a-z{|}~]{1,64})?$/.test(value ?? '')) bad(what, 'msid must be "<id> [<appdata>]", each 1 to 64 token characters');
      return;
    }
    case 'sendonly':
    case 'recvonly':
    case 'sendrecv':
    case 'inactive':
    case 'rtcp-mux':
    case 'rtcp-rsize':
    case 'end-of-candidates':
      if (value !== undefined) bad(what, `a=${name} takes no value`);
      return;
    default:
      return;
  }
}

/**
 * Checks every line of an offer split into session lines and m-sections (Sdp.ts has already
 * bounded the size and split the m= lines). Throws SdpError 'BAD_SDP' naming the first problem.
 * Protocols that are well formed but not DTLS-SRTP are 'UNSUPPORTED_OFFER' (422).
 */
export function checkOfferGrammar(session: string[], sections: GrammarSection[]): void {
  for (const kind of ['o', 's', 't']) {
    const n = session.filter((l) => l.startsWith(`${kind}=`)).length;
    if (n !== 1) bad('session', n === 0 ? `missing the required ${kind}= line (RFC 8866 §5)` : `${n} ${kind}= lines (RFC 8866 allows one)`);
  }
  const mids = new Set<string>();
  for (const line of session) checkLine(line, 'session');
  sections.forEach((s, i) => {
    const where = `m-line ${i + 1} (${s.kind})`;
    const mline = `m=${s.kind} ${s.port} ${s.proto} ${s.fmts.join(' ')}`;
    if (hasControl(mline)) bad(where, 'the m= line holds a control character');
    // RFC 8866 §5.14: <port>[/<number of ports>].
    const [port, count] = s.port.split('/');
    if (int(port, 0, 65535) === null) bad(where, `port ${quote(s.port)} is not 0 to 65535`);
    if (count !== undefined && int(count, 1, 65535) === null) bad(where, `port count ${quote(count)} is not a number`);
    if (!SECURE_PROTOS.has(s.proto)) {
      if (PLAIN_PROTOS.has(s.proto)) throw new SdpError('UNSUPPORTED_OFFER', `${where}: transport ${s.proto} has no DTLS-SRTP; WebRTC needs UDP/TLS/RTP/SAVPF`);
      bad(where, `unknown transport protocol ${quote(s.proto)}`);
    }
    if (s.fmts.length === 0 || (s.fmts.length === 1 && s.fmts[0] === '')) bad(where, 'the m= line lists no payload types');
    const seen = new Set<number>();
    for (const f of s.fmts) {
      const pt = payloadType(f);
      if (pt === null) bad(where, `payload type ${quote(f)} is not 0 to 127`);
      if (seen.has(pt)) bad(where, `payload type ${pt} is listed twice`);
      seen.add(pt);
    }
    const once = new Map<string, string>();
    let direction: string | undefined;
    const rtpmaps = new Set<string>();
    const extmaps = new Set<string>();
    for (const line of s.lines) {
      checkLine(line, where);
      const name = /^a=([^:]*)/.exec(line)?.[1];
      if (name === undefined) continue;
      if (DIRECTIONS.has(name)) {
        if (direction !== undefined && direction !== name) bad(where, `both a=${direction} and a=${name}`);
        direction = name;
      }
      if (name === 'mid' || name === 'ice-ufrag' || name === 'ice-pwd' || name === 'setup') {
        const prev = once.get(name);
        if (prev !== undefined && prev !== line) bad(where, `two different a=${name} lines`);
        once.set(name, line);
      }
      if (name === 'rtpmap') {
        const pt = line.slice(9).split(' ')[0] ?? '';
        if (rtpmaps.has(pt)) bad(where, `two a=rtpmap lines for payload type ${pt}`);
        rtpmaps.add(pt);
      }
      if (name === 'extmap') {
        const id = (/^a=extmap:(\d+)/.exec(line)?.[1] ?? '').replace(/^0+/, '');
        if (extmaps.has(id)) bad(where, `two a=extmap lines with id ${id}`);
        extmaps.add(id);
      }
    }
    const mid = once.get('mid')?.slice(6);
    if (mid !== undefined) {
      if (mids.has(mid)) bad(where, `mid ${quote(mid)} is used by another m-line`);
      mids.add(mid);
    }
  });
  for (const line of session) {
    if (!line.startsWith('a=group:')) continue;
    const [semantics, ...tags] = line.slice(8).split(' ');
    if (semantics !== 'BUNDLE') continue;
    if (tags.length === 0) bad('session', 'a=group:BUNDLE names no mid');
    const unknown = tags.find((tag) => !mids.has(tag));
    if (unknown !== undefined) bad('session', `a=group:BUNDLE names mid ${quote(unknown)}, which no m-line has`);
    if (new Set(tags).size !== tags.length) bad('session', 'a=group:BUNDLE names a mid twice');
  }
}

function checkLine(line: string, where: string): void {
  if (hasControl(line)) bad(where, `${quote(line)} holds a control character`);
  const type = line[0];
  const value = line.slice(2);
  switch (type) {
    case 'v':
      if (value !== '0') bad(where, `${quote(line)}: only v=0 exists`);
      return;
    case 'o': {
      // RFC 8866 §5.2: <username> <sess-id> <sess-version> <nettype> <addrtype> <unicast-address>.
      const f = value.split(' ');
      if (f.length !== 6 || !/^\d{1,20}$/.test(f[1] ?? '') || !/^\d{1,20}$/.test(f[2] ?? '') || f[3] !== 'IN' || !/^IP[46]$/.test(f[4] ?? '') || (f[5] ?? '') === '') {
        bad(where, `${quote(line)} is not "o=<username> <session id> <version> IN IP4|IP6 <address>"`);
      }
      return;
    }
    case 't':
      if (!/^\d{1,20} \d{1,20}$/.test(value)) bad(where, `${quote(line)} is not "t=<start> <stop>"`);
      return;
    case 'c':
      if (!/^IN IP[46] [^\s/]+(\/\d{1,3}){0,2}$/.test(value)) bad(where, `${quote(line)} is not "c=IN IP4|IP6 <address>"`);
      return;
    case 'b': {
      const r = /^([A-Za-z0-9-_.]+):(\d{1,10})$/.exec(value);
      if (!r || int(r[2], 0, MAX_U32) === null) bad(where, `${quote(line)} is not "b=<type>:<0 to 4294967295>"`);
      return;
    }
    case 'a':
      checkAttribute(line, where);
      return;
    default:
      return;
  }
}

/**
 * Checks one line of a trickle sdpfrag (RFC 8840 §9: ice-ufrag, ice-pwd, ice-options, m=, mid,
 * candidates, end-of-candidates). Throws SdpError 'BAD_SDP' naming the line.
 */
export function checkFragLine(line: string): void {
  if (hasControl(line)) bad('sdpfrag', `${quote(line)} holds a control character`);
  if (line.startsWith('m=')) {
    const [, port = '', proto = '', ...fmts] = line.slice(2).split(' ');
    if (int(port.split('/')[0], 0, 65535) === null) bad('sdpfrag', `${quote(line)}: port is not 0 to 65535`);
    if (!/^[A-Za-z0-9/]+$/.test(proto) || fmts.some((f) => !TOKEN.test(f))) bad('sdpfrag', `${quote(line)} is not "m=<media> <port> <proto> <fmt> …"`);
    return;
  }
  if (line.startsWith('a=')) checkAttribute(line, 'sdpfrag');
}
