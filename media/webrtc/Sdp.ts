/**
 * The SDP checks and rewrites done before werift sees an offer, and after it writes an answer.
 *
 * werift negotiates codecs by MIME type only (every remote H.264 variant survives, the first one
 * wins), so we pick exactly one payload type per m-line here: the one we can decode (WHIP) or the
 * one of our encoders the viewer gets (WHEP: H.264 if offered, else VP8), and strip the rest (RTX, RED, FEC included: we rely on NACK with
 * in-band retransmission). Cheap structural limits run first so a hostile offer (thousands of
 * m-lines, megabytes of attributes) costs one linear scan and never reaches the ICE/DTLS stack.
 */
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { SdpError } from '../errors.ts';
import { checkFragLine, checkOfferGrammar } from './SdpGrammar.ts';

/** Who sent the offer: a publisher (WHIP) or a viewer (WHEP). */
export type OfferRole = 'whip' | 'whep';

/**
 * Video codecs on either side: what we decode from publishers, and what we send viewers.
 * - `H264`: packetization-mode 1; viewers get constrained baseline from the stream's x264 encoder.
 * - `VP8`: viewers get it from the stream's VP8 branch, started while VP8 viewers exist.
 */
import type { VideoCodec } from '../VideoCodec.ts';

export type { VideoCodec };
/** Video codecs we decode from publishers. */
export type IngestVideoCodec = VideoCodec;

export interface PreparedOffer {
  /** The rewritten offer to hand to werift. */
  sdp: string;
  /** The one video payload kept: the publisher's codec (WHIP) or the one the viewer is sent (WHEP). */
  video: { codec: VideoCodec; payloadType: number; fmtp: string } | null;
  audio: { payloadType: number } | null;
  /** a=candidate lines the offer carried (0 for OBS, which never trickles). */
  candidateCount: number;
  iceUfrag: string;
  /** The m-lines' mids (a=mid), which an answer's tracks must carry. */
  mids: { video?: string; audio?: string };
}

/** Limits on an offer (defaults in MediaSettings). */
export interface OfferLimits {
  /** Bytes. */
  maxBytes: number;
  /** Lines; Chrome's offers are ~120 lines, OBS's ~40. */
  maxLines: number;
  /**
   * Keep loopback candidates (a node that serves on loopback itself, in tests and local
   * development); otherwise they are dropped with every address class a node must never dial.
   */
  allowLoopbackCandidates?: boolean;
}

/** Candidates kept per offer (browsers send a handful; the rest would only be connectivity checks to nowhere). */
export const MAX_OFFER_CANDIDATES = 32;

interface Section {
  /** The m= line split: [kind, port, proto, ...fmts]. */
  kind: string;
  port: string;
  proto: string;
  fmts: string[];
  lines: string[];
}

function split(sdp: string, limits: OfferLimits): { session: string[]; sections: Section[] } {
  const bytes = Buffer.byteLength(sdp);
  if (bytes > limits.maxBytes) {
    throw new SdpError('SDP_TOO_LARGE', `offer is ${bytes} bytes, limit ${limits.maxBytes}`);
  }
  const lines = sdp.split(/\r?\n/).filter((l) => l.length > 0);
  if (lines.length > limits.maxLines) {
    throw new SdpError('SDP_TOO_LARGE', `offer has ${lines.length} lines, limit ${limits.maxLines}`);
  }
  if (lines[0] !== 'v=0') throw new SdpError('BAD_SDP', 'offer does not start with v=0');
  const session: string[] = [];
  const sections: Section[] = [];
  for (const line of lines) {
    if (!/^[a-z]=/.test(line)) throw new SdpError('BAD_SDP', `malformed SDP line: ${line.slice(0, 60)}`);
    if (line.startsWith('m=')) {
      // RFC 9725 §4.2: one MediaStream of at most one audio and one video track.
      if (sections.length >= 2) throw new SdpError('UNSUPPORTED_OFFER', 'offer has more than 2 m-lines (WHIP/WHEP allow one audio and one video)');
      const [kind = '', port = '', proto = '', ...fmts] = line.slice(2).split(' ');
      if (kind !== 'audio' && kind !== 'video') throw new SdpError('UNSUPPORTED_OFFER', `unsupported m-line kind ${JSON.stringify(kind.slice(0, 20))} (WHIP/WHEP carry audio and video)`);
      sections.push({ kind, port, proto, fmts, lines: [] });
    } else if (sections.length === 0) {
      session.push(line);
    } else {
      (sections[sections.length - 1] as Section).lines.push(line);
    }
  }
  // Every line against its grammar before anything acts on it (werift and libdatachannel throw on what they cannot parse).
  checkOfferGrammar(session, sections);
  return { session, sections };
}

function attr(section: Section, session: string[], name: string): string | undefined {
  const prefix = `a=${name}:`;
  const hit = section.lines.find((l) => l.startsWith(prefix)) ?? session.find((l) => l.startsWith(prefix));
  return hit?.slice(prefix.length);
}

function direction(section: Section, session: string[]): string {
  for (const d of ['sendonly', 'recvonly', 'sendrecv', 'inactive']) {
    if (section.lines.includes(`a=${d}`)) return d;
  }
  return session.find((l) => /^a=(sendonly|recvonly|sendrecv|inactive)$/.test(l))?.slice(2) ?? 'sendrecv';
}

interface RtpMap {
  pt: number;
  name: string;
  fmtp: string;
}

function rtpMaps(section: Section): RtpMap[] {
  const maps: RtpMap[] = [];
  for (const line of section.lines) {
    const m = /^a=rtpmap:(\d{1,3}) ([^/\s]+)\//.exec(line);
    if (!m) continue;
    const pt = Number(m[1]);
    // RTP payload types are 7 bits (RFC 3550 §5.1); anything else is not a format we can map.
    if (pt > 127) continue;
    const fmtp = section.lines.find((l) => l.startsWith(`a=fmtp:${pt} `))?.slice(`a=fmtp:${pt} `.length) ?? '';
    maps.push({ pt, name: (m[2] as string).toUpperCase(), fmtp });
  }
  // Keep the offerer's preference order (the m= line's format list).
  const order = section.fmts.map(Number);
  return maps.sort((a, b) => order.indexOf(a.pt) - order.indexOf(b.pt));
}

function fmtpParam(fmtp: string, key: string): string | undefined {
  for (const kv of fmtp.split(';')) {
    const [k, v] = kv.trim().split('=');
    if (k?.toLowerCase() === key) return v;
  }
  return undefined;
}

/** H.264 with packetization-mode=1 (non-interleaved, FU-A), the only mode we send or depay. */
function isH264Mode1(m: RtpMap): boolean {
  return m.name === 'H264' && fmtpParam(m.fmtp, 'packetization-mode') === '1';
}

/** Rank for a viewer's H.264 variants: our encoder emits constrained baseline (42e0xx). */
function viewerH264Rank(m: RtpMap): number {
  const plid = (fmtpParam(m.fmtp, 'profile-level-id') ?? '').toLowerCase();
  if (plid.startsWith('42e0')) return 0;
  if (plid.startsWith('42')) return 1;
  return 2;
}

function keepOnly(section: Section, pt: number): void {
  section.fmts = [String(pt)];
  section.lines = section.lines.filter((l) => {
    const m = /^a=(rtpmap|fmtp|rtcp-fb):(\d+|\*)[ ]/.exec(l);
    if (!m) return true;
    return m[2] === String(pt) || m[2] === '*';
  });
}

/**
 * Validates an offer and rewrites it to one codec per m-line. Throws SdpError with the HTTP
 * status the endpoint answers (400 malformed, 413 too large, 422 unacceptable).
 */
export function prepareOffer(sdp: string, role: OfferRole, limits: OfferLimits): PreparedOffer {
  const { session, sections } = split(sdp, limits);
  if (sections.length === 0) throw new SdpError('BAD_SDP', 'offer has no m-lines');
  let video: PreparedOffer['video'] = null;
  let audio: PreparedOffer['audio'] = null;
  let candidateCount = 0;
  let iceUfrag = '';
  const mids: PreparedOffer['mids'] = {};
  for (const section of sections) {
    const ufrag = attr(section, session, 'ice-ufrag');
    if (!ufrag || !attr(section, session, 'ice-pwd')) throw new SdpError('BAD_SDP', `m=${section.kind} has no ice-ufrag/ice-pwd`);
    if (!attr(section, session, 'fingerprint')) throw new SdpError('BAD_SDP', `m=${section.kind} has no DTLS fingerprint`);
    iceUfrag ||= ufrag;
    const mid = section.lines.find((l) => l.startsWith('a=mid:'))?.slice(6);
    if (mid !== undefined) mids[section.kind as 'audio' | 'video'] = mid;
    const dir = direction(section, session);
    const wanted = role === 'whip' ? ['sendonly', 'sendrecv'] : ['recvonly', 'sendrecv'];
    if (!wanted.includes(dir)) {
      throw new SdpError('UNSUPPORTED_OFFER', `m=${section.kind} is ${dir}; ${role.toUpperCase()} needs ${wanted.join(' or ')}`);
    }
    const maps = rtpMaps(section);
    if (section.kind === 'video') {
      if (video) throw new SdpError('UNSUPPORTED_OFFER', 'offer has two video m-lines');
      // A viewer gets H.264 whenever it takes it (the always-running encoder); VP8 only when it
      // has no H.264 (libwebrtc builds without proprietary codecs), from the lazily started branch.
      const pick =
        role === 'whip'
          ? maps.find((m) => m.name === 'VP8' || isH264Mode1(m))
          : (maps.filter(isH264Mode1).sort((a, b) => viewerH264Rank(a) - viewerH264Rank(b))[0] ?? maps.find((m) => m.name === 'VP8'));
      if (!pick) {
        throw new SdpError(
          'UNSUPPORTED_OFFER',
          role === 'whip'
            ? 'no supported video codec offered (need VP8 or H264 packetization-mode=1)'
            : 'viewer accepts neither H264 packetization-mode=1 nor VP8',
        );
      }
      keepOnly(section, pick.pt);
      video = { codec: pick.name as VideoCodec, payloadType: pick.pt, fmtp: pick.fmtp };
    } else {
      if (audio) throw new SdpError('UNSUPPORTED_OFFER', 'offer has two audio m-lines');
      const pick = maps.find((m) => m.name === 'OPUS');
      if (!pick) throw new SdpError('UNSUPPORTED_OFFER', 'audio m-line offers no Opus');
      keepOnly(section, pick.pt);
      audio = { payloadType: pick.pt };
    }
    // Candidates the node may dial: well formed, not loopback (unless we serve there), link-local,
    // multicast or unspecified, and a bounded number of them.
    section.lines = section.lines.filter((l) => {
      if (!l.startsWith('a=candidate:')) return true;
      if (candidateCount >= MAX_OFFER_CANDIDATES || refuseRemoteCandidate(l.slice(2), { allowLoopback: limits.allowLoopbackCandidates === true }) !== null) return false;
      candidateCount++;
      return true;
    });
  }
  if (role === 'whip' && !video) throw new SdpError('UNSUPPORTED_OFFER', 'WHIP offer has no video m-line');
  const out: string[] = [...session];
  for (const s of sections) {
    out.push(`m=${s.kind} ${s.port} ${s.proto} ${s.fmts.join(' ')}`);
    for (const l of s.lines) {
      // werift fails the ICE agent ~1 ms after checks start when an offer ends candidates
      // without carrying any; OBS-like clients rely on peer-reflexive discovery instead.
      if (candidateCount === 0 && l === 'a=end-of-candidates') continue;
      out.push(l);
    }
  }
  return { sdp: `${out.join('\r\n')}\r\n`, video, audio, candidateCount, iceUfrag, mids };
}

/**
 * The answer's candidates as clients should see them:
 * - only those on `interfaces` when the node is told which local addresses to use (werift's
 *   `iceInterfaceAddresses` does not limit what it advertises);
 * - each host candidate again on every `announced` address, same transport and port, just below
 *   it in priority: behind a 1:1 NAT, Docker port publishing or a cloud VM's public IP the node
 *   cannot see the address clients must reach, but the NAT keeps the port. Checks that reach the
 *   node through it are answered from the local socket and mapped back by the same NAT.
 */
export function rewriteAnswerCandidates(answer: string, opts: { interfaces?: readonly string[] | undefined; announced?: readonly string[] | undefined }): string {
  const keep = opts.interfaces && opts.interfaces.length > 0 ? new Set(opts.interfaces) : null;
  const announced = opts.announced ?? [];
  if (!keep && announced.length === 0) return answer;
  const out: string[] = [];
  for (const line of answer.split('\r\n')) {
    if (!line.startsWith('a=candidate:')) {
      out.push(line);
      continue;
    }
    const f = line.split(' ');
    const address = f[4];
    if (address === undefined || (keep && !keep.has(address))) continue;
    out.push(line);
    if (f[7] !== 'host') continue;
    announced.forEach((extra, k) => {
      if (extra === address) return;
      const copy = [...f];
      copy[0] = `${f[0]}a${k}`; // a foundation of its own: a different address
      copy[3] = String(Math.max(1, Number(f[3]) - 1 - k));
      copy[4] = extra;
      out.push(copy.join(' '));
    });
  }
  return out.join('\r\n');
}

/** Why a trickled candidate is not used (null: it is fine). */
export function refuseRemoteCandidate(candidate: string, opts: { allowLoopback: boolean }): string | null {
  // candidate:<foundation> <component> <transport> <priority> <address> <port> typ <type> …
  const f = candidate.trim().split(/\s+/);
  if (f.length < 8 || !/^candidate:\S+$/.test(f[0] ?? '') || f[6] !== 'typ') return 'malformed';
  const transport = (f[2] ?? '').toLowerCase();
  if (transport !== 'udp' && transport !== 'tcp') return 'unknown transport';
  const port = Number(f[5]);
  if (!Number.isInteger(port) || port < 1 || port > 65535) return 'bad port';
  const address = f[4] ?? '';
  if (address.endsWith('.local')) return 'mDNS names are not resolved';
  const kind = ipKind(address);
  if (kind === null) return 'not an IP address';
  if (kind === 'loopback' && !opts.allowLoopback) return 'loopback';
  if (kind === 'unspecified' || kind === 'multicast' || kind === 'linkLocal' || kind === 'broadcast') return kind;
  return null;
}

/** The address classes a media node must never send connectivity checks to (or null for a non-IP). */
function ipKind(address: string): 'unicast' | 'loopback' | 'unspecified' | 'multicast' | 'linkLocal' | 'broadcast' | null {
  if (!isIP(address)) return null;
  const a = ipaddr.process(address);
  const range = a.range();
  if (range === 'loopback') return 'loopback';
  if (range === 'unspecified') return 'unspecified';
  if (range === 'multicast') return 'multicast';
  if (range === 'linkLocal') return 'linkLocal';
  if (range === 'broadcast') return 'broadcast';
  return 'unicast';
}

/** The parts of an RFC 8840 trickle-ice-sdpfrag body we act on. */
export interface SdpFrag {
  iceUfrag: string | undefined;
  icePwd: string | undefined;
  /** Candidate attribute values (without the `a=` prefix), with the m-line mid they belong to. */
  candidates: { candidate: string; mid: string | undefined }[];
}

export function parseSdpFrag(body: string, maxBytes: number): SdpFrag {
  if (Buffer.byteLength(body) > maxBytes) throw new SdpError('SDP_TOO_LARGE', `sdpfrag larger than ${maxBytes} bytes`);
  const frag: SdpFrag = { iceUfrag: undefined, icePwd: undefined, candidates: [] };
  let mid: string | undefined;
  for (const line of body.split(/\r?\n/)) {
    if (line.length === 0) continue;
    if (!/^[a-z]=/.test(line)) throw new SdpError('BAD_SDP', `malformed sdpfrag line: ${line.slice(0, 60)}`);
    checkFragLine(line);
    if (line.startsWith('a=ice-ufrag:')) frag.iceUfrag = line.slice(12);
    else if (line.startsWith('a=ice-pwd:')) frag.icePwd = line.slice(10);
    else if (line.startsWith('a=mid:')) mid = line.slice(6);
    else if (line.startsWith('a=candidate:')) frag.candidates.push({ candidate: line.slice(2), mid });
  }
  return frag;
}
