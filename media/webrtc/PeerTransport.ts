/**
 * werift peer connections as WHIP/WHEP need them: one codec set per role, host candidates on the
 * configured addresses and UDP port range (plus passive ICE-TCP when enabled), and a non-trickle
 * answer (RFC 9725 §4.3.1: the server gathers every candidate before answering; OBS never trickles
 * and gathers only after the answer).
 *
 * The node never gathers through STUN or TURN itself: it has a routable host address or is told
 * the one clients reach (`announcedAddresses`), and waiting on a STUN/TURN server while OBS's 8 s
 * POST timeout runs would only delay the answer (decision 0003). Clients get the servers in Link
 * headers (IceServers.ts) and reach the node through them; the node learns their relayed or
 * reflexive addresses from their checks.
 */
import { RTCPeerConnection, RTCRtpCodecParameters } from 'werift';
import { Socket as UdpSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import { DtlsHandshakeOrder } from './DtlsHandshakeOrder.ts';
import { SdpError } from '../errors.ts';
import { rewriteAnswerCandidates, type OfferRole } from './Sdp.ts';

export interface TransportOptions {
  /** Local addresses to gather on and advertise (WEBRTC_INTERFACES). Default: every interface. */
  iceAddresses?: string[] | undefined;
  /**
   * Addresses clients reach this node at that are not on any of its interfaces (1:1 NAT, a cloud
   * VM's public IP, Docker port publishing: WEBRTC_ANNOUNCED_ADDRESSES). Every host candidate is
   * offered again on each, with the same port.
   */
  announcedAddresses?: string[] | undefined;
  /** Inclusive UDP (and ICE-TCP) port range, e.g. [40000, 40999]. Default: ephemeral ports. */
  udpPortRange?: [number, number] | undefined;
  /** Also offer passive ICE-TCP candidates (RFC 6544) for clients whose UDP is blocked. */
  iceTcp?: boolean | undefined;
  /** Receive buffer asked for each UDP socket, bytes (WEBRTC_UDP_BUFFER_BYTES; see sizeReceiveBuffers). */
  udpRecvBufferBytes?: number | undefined;
}

/** What WEBRTC_UDP_BUFFER_BYTES defaults to: 4 MiB, ≈ 5 s of a 6 Mb/s publisher (measured: docs/performance.md). */
export const DEFAULT_UDP_RECV_BUFFER_BYTES = 4 * 1024 * 1024;

/**
 * The largest receive buffer a process may ask for without privileges, bytes (Linux
 * `net.core.rmem_max`); null where the system does not say.
 */
export function udpRecvBufferCap(): number | null {
  try {
    const n = Number(readFileSync('/proc/sys/net/core/rmem_max', 'utf8').trim());
    return Number.isFinite(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

const FEEDBACK = [{ type: 'nack' }, { type: 'nack', parameter: 'pli' }, { type: 'ccm', parameter: 'fir' }];

/** Who the connection is for: a publisher (WHIP), a viewer (WHEP), or our own pull of a stream from its origin node (an edge's WHEP client). */
export type PeerRole = OfferRole | 'pull';

function codecs(role: PeerRole) {
  const opus = new RTCRtpCodecParameters({ mimeType: 'audio/opus', clockRate: 48000, channels: 2 });
  const h264 = new RTCRtpCodecParameters({
    mimeType: 'video/H264',
    clockRate: 90000,
    rtcpFeedback: FEEDBACK,
    parameters: 'profile-level-id=42e01f;packetization-mode=1;level-asymmetry-allowed=1',
  });
  const vp8 = new RTCRtpCodecParameters({ mimeType: 'video/VP8', clockRate: 90000, rtcpFeedback: FEEDBACK });
  // Offers reach werift cut down to one video codec (Sdp.ts), so the order here picks nothing.
  // An edge's pull offers H.264 alone: it relays the origin's encode and encodes nothing itself.
  return { audio: [opus], video: role === 'pull' ? [h264] : role === 'whip' ? [vp8, h264] : [h264, vp8] };
}

export function createPeerConnection(role: PeerRole, opts: TransportOptions): RTCPeerConnection {
  const addresses = opts.iceAddresses ?? [];
  const loopback = addresses.filter((a) => a.startsWith('127.') || a === '::1');
  const v4 = addresses.filter((a) => isIPv4(a));
  return new RTCPeerConnection({
    codecs: codecs(role),
    iceServers: [],
    icePortRange: opts.udpPortRange,
    // One IPv4 address: bind the sockets to it (replies then leave from the advertised address on
    // a multi-homed host). Several: bind all and advertise only those (rewriteAnswerCandidates).
    iceInterfaceAddresses: v4.length === 1 ? { udp4: v4[0] as string } : undefined,
    // werift skips loopback when gathering; addresses named explicitly must still be offered.
    iceAdditionalHostAddresses: loopback.length > 0 ? loopback : undefined,
    iceUseIpv6: addresses.some((a) => a.includes(':')) || opts.iceAddresses === undefined,
    iceUseTcp: opts.iceTcp === true,
    bundlePolicy: 'max-bundle',
  });
}

/** werift's STUN/TURN protocol objects of every ICE transport of `pc` (not part of its typed API). */
interface IceProtocol {
  transport?: { socket?: unknown };
  request?: (req: unknown, addr: unknown, key: unknown, options?: unknown, onSent?: unknown) => Promise<unknown>;
  patientConsent?: true;
}
function iceProtocols(pc: RTCPeerConnection): IceProtocol[] {
  return pc.iceTransports.flatMap((ice) => (ice.connection as unknown as { protocols?: IceProtocol[] }).protocols ?? []);
}

/**
 * Asks for `bytes` of receive buffer (SO_RCVBUF) on every UDP socket the connection gathered on.
 *
 * Every publisher's packets are read by the one JS thread. When it is late (a busy host, more
 * streams than the cores encode), datagrams wait in the socket's kernel buffer; the default
 * (`net.core.rmem_default`, 208 KiB) holds about one second of one 1.5 Mb/s publisher, and what
 * does not fit is dropped. Lost packets are mostly lost key frames (the largest), so an overloaded
 * node did not slow its streams evenly: some froze until the publisher's next intact key frame.
 * With 4 MiB the same overload lost nothing (docs/performance.md). A buffer absorbs stalls, not a
 * thread that falls behind for good: then packets, ICE consent answers among them, wait seconds
 * (decision 0017; admission keeps a node out of that). The kernel caps the size at
 * `net.core.rmem_max` without an error (`reverie doctor` and the media role's start say so).
 * The sockets are werift's, reached through its ICE connection (not part of its typed API).
 */
export function sizeReceiveBuffers(pc: RTCPeerConnection, bytes: number): void {
  for (const p of iceProtocols(pc)) {
    const socket = p.transport?.socket;
    if (!(socket instanceof UdpSocket)) continue;
    try {
      socket.setRecvBufferSize(bytes);
    } catch {
      // Closed under us (the session ended while answering): nothing to size.
    }
  }
}

/**
 * How long an ICE consent check (RFC 7675) waits for its answer, at least, ms: just under the
 * 4–6 s between checks (werift abandons a check when the next one starts anyway).
 */
export const CONSENT_RESPONSE_FLOOR_MS = 3_800;

/**
 * Lets the node's consent checks wait for answers the JS thread reads late.
 *
 * werift sends a consent check every 4–6 s and waits 2 × RTT + 200 ms (at least 500 ms) for the
 * answer; 30 s without one and the session fails. The answer shares the socket's queue with the
 * publisher's media, so when the one JS thread is late (more streams than the cores carry, a busy
 * neighbour) every answer is read after its check gave up, and a publisher whose media was still
 * arriving was dropped after 30 s (decision 0020). RFC 7675 sets no per-check timeout, only the
 * 30 s; waiting up to the next check changes nothing on a quiet node (answers come in
 * milliseconds) and keeps a late one's sessions. Connectivity checks (which pass a retry count,
 * not options) keep werift's own timing. The protocols are werift's, reached through its ICE
 * connection (not part of its typed API), as in sizeReceiveBuffers.
 */
export function patientConsent(pc: RTCPeerConnection): void {
  for (const p of iceProtocols(pc)) {
    const request = p.request;
    if (typeof request !== 'function' || p.patientConsent) continue;
    p.patientConsent = true;
    p.request = function (this: unknown, req, addr, key, options, onSent) {
      const o = options as { retransmissions?: number; responseTimeout?: number } | undefined;
      const consent = typeof o === 'object' && o !== null && o.retransmissions === 0 && typeof o.responseTimeout === 'number';
      return request.call(this, req, addr, key, consent ? { ...o, responseTimeout: Math.max(o.responseTimeout as number, CONSENT_RESPONSE_FLOOR_MS) } : options, onSent);
    };
  }
}

/** werift's AEAD suite (AES-GCM): seals with the keys of the session type given, opens with the other side's. */
interface Aead {
  encrypt(type: number, data: Buffer, header: { type: number; version: number; epoch: number; sequenceNumber: number }): Buffer;
  decrypt(type: number, data: Buffer, header: { type: number; version: number; epoch: number; sequenceNumber: number }): Buffer;
}

/**
 * An encrypted record `socket` sent, sealed again under record sequence number `seq`: opened with
 * the socket's own write key (werift's decrypt with the other session type) and sealed anew.
 */
function reseal(socket: NonNullable<RTCPeerConnection['dtlsTransports'][number]['dtls']>, record: Buffer, seq: number): Buffer | null {
  const aead = (socket.cipher as { cipher?: Aead }).cipher;
  if (!aead) return null;
  const own = socket.sessionType as number;
  const other = own === 1 ? 2 : 1; // werift's SessionType: CLIENT 1, SERVER 2
  const header = { type: record.readUInt8(0), version: record.readUInt16BE(1), epoch: record.readUInt16BE(3) };
  try {
    const plain = aead.decrypt(other, record.subarray(13), { ...header, sequenceNumber: record.readUIntBE(5, 6) });
    const sealed = aead.encrypt(own, plain, { ...header, sequenceNumber: seq });
    const out = Buffer.alloc(13 + sealed.length);
    record.copy(out, 0, 0, 5);
    out.writeUIntBE(seq, 5, 6);
    out.writeUInt16BE(sealed.length, 11);
    sealed.copy(out, 13);
    return out;
  } catch {
    return null;
  }
}

/**
 * Puts werift's DTLS handshake in order on links that reorder (DtlsHandshakeOrder.ts, decision
 * 0022): its flights leave packed in one datagram, the records it sends again under new record
 * sequence numbers, and the peer's handshake messages reach it whole and in sequence. Over a link
 * that reordered (40 ± 10 ms, 3 % loss), an OBS-like publisher (libdatachannel, whose OpenSSL is
 * the DTLS server; werift is the client) connected 2 times in 20: ICE connected, DTLS never
 * completed. werift builds its DTLS socket when ICE connects, inside the transport's
 * `start()`, and has no option for this: each DTLS transport's `start` is wrapped to put the
 * order between that socket and the ICE transport it reads from and sends to, as soon as the
 * socket exists and before it sends its first record. The socket is werift's (typed, but its
 * receive and send functions are not meant to be replaced).
 */
export function orderDtlsHandshake(pc: RTCPeerConnection): void {
  for (const transport of pc.dtlsTransports) {
    const own = transport as unknown as { start: () => Promise<void>; orderedHandshake?: true };
    if (own.orderedHandshake) continue;
    own.orderedHandshake = true;
    const start = transport.start;
    own.start = function (this: typeof transport) {
      const started = start.call(this);
      // The socket is built synchronously inside start(); its first flight leaves ≥ 100 ms later.
      const socket = this.dtls;
      if (socket) {
        const io = socket.transport as unknown as { send: (datagram: Buffer) => Promise<void>; socket: { onData: (datagram: Buffer) => void } };
        const send = io.send;
        const deliver = io.socket.onData;
        const order = new DtlsHandshakeOrder({
          deliver: (datagram) => deliver(datagram),
          send: (datagram) => send(datagram),
          handshakeDone: () => socket.connected,
          // werift's cipher context holds its AEAD suite once the master secret is known.
          hasKeys: () => (socket.cipher as { cipher?: unknown }).cipher !== undefined,
          reseal: (record, seq) => {
            const sealed = reseal(socket, record, seq);
            // werift numbers its later records of the epoch from its own counter: past this one.
            if (sealed && socket.dtls.epoch === record.readUInt16BE(3)) socket.dtls.recordSequenceNumber = Math.max(socket.dtls.recordSequenceNumber, seq);
            return sealed;
          },
        });
        io.socket.onData = (datagram) => order.incoming(datagram);
        io.send = (datagram) => order.outgoing(datagram);
      }
      return started;
    };
  }
}

/**
 * The round trip of the connection's nominated ICE pair as werift last measured it (its
 * connectivity check, then each consent check every 4–6 s), ms, with how many measurements it
 * has made; null before one. Read from werift's ICE connection (not part of its typed API).
 */
export function iceRoundTrip(pc: RTCPeerConnection): { rttMs: number; samples: number } | null {
  for (const ice of pc.iceTransports) {
    const pair = (ice.connection as unknown as { nominated?: { rtt?: number; roundTripTimeMeasurements?: number } }).nominated;
    if (typeof pair?.rtt === 'number' && Number.isFinite(pair.rtt)) return { rttMs: pair.rtt * 1000, samples: pair.roundTripTimeMeasurements ?? 1 };
  }
  return null;
}

/** werift's receiver NACK handler (private in its typed API). */
interface WeriftNackHandler {
  addPacket?: (packet: unknown) => void;
  close?: () => void;
  ownedByUs?: true;
}

/**
 * Turns werift's own NACK generation off on every receiver of `pc`: the caller asks for lost
 * packets itself (NackGenerator, decision 0021). werift's handler has no option to turn it off; it
 * compared sequence numbers without wrap arithmetic (a loss at the wrap stopped its NACKs for
 * minutes) and asked for every gap every 5 ms ten times. Its `addPacket` becomes a no-op and its
 * timer is stopped; werift's RTCP receiver reports and PLI are untouched. The handler is werift's,
 * reached through the receiver (not part of its typed API), as in patientConsent.
 */
export function disableWeriftNacks(pc: RTCPeerConnection): void {
  for (const transceiver of pc.getTransceivers()) {
    const nack = (transceiver.receiver as unknown as { nack?: WeriftNackHandler }).nack;
    if (!nack || nack.ownedByUs || typeof nack.addPacket !== 'function') continue;
    nack.ownedByUs = true;
    nack.addPacket = () => {};
    nack.close?.();
  }
}

/**
 * Applies the (already prepared) offer, answers, waits for ICE gathering to complete and returns
 * the answer SDP holding every candidate. Rejects if gathering takes longer than `timeoutMs`.
 */
export async function answerWithAllCandidates(pc: RTCPeerConnection, offerSdp: string, transport: TransportOptions, timeoutMs: number): Promise<string> {
  try {
    await pc.setRemoteDescription({ type: 'offer', sdp: offerSdp });
    await pc.setLocalDescription(await pc.createAnswer());
  } catch (err) {
    // Sdp.ts checks what werift reads; anything it still cannot apply is the offer's fault (400), not ours.
    throw offerRefused(err);
  }
  return withAllCandidates(pc, transport, timeoutMs);
}

/**
 * After the local description is set: waits for ICE gathering to complete, readies the transport
 * (receive buffers, patient consent, DTLS handshake order) and returns the local SDP with every
 * candidate, as advertised.
 */
async function withAllCandidates(pc: RTCPeerConnection, transport: TransportOptions, timeoutMs: number): Promise<string> {
  if (pc.iceGatheringState !== 'complete') {
    await pc.iceGatheringStateChange.watch((state) => state === 'complete', timeoutMs);
  }
  if (transport.udpRecvBufferBytes) sizeReceiveBuffers(pc, transport.udpRecvBufferBytes);
  patientConsent(pc);
  orderDtlsHandshake(pc);
  const sdp = pc.localDescription?.sdp;
  if (!sdp) throw new Error('no local description after gathering');
  return rewriteAnswerCandidates(sdp, { interfaces: transport.iceAddresses, announced: transport.announcedAddresses });
}

/**
 * Offers to receive (recvonly) one H.264 video and one Opus audio track, waits for ICE gathering
 * to complete and returns the offer SDP holding every candidate: an edge's WHEP request to the
 * stream's origin node (non-trickle, as OBS). WhipSession's `accept` applies the answer.
 */
export async function offerWithAllCandidates(pc: RTCPeerConnection, transport: TransportOptions, timeoutMs: number): Promise<string> {
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  await pc.setLocalDescription(await pc.createOffer());
  return withAllCandidates(pc, transport, timeoutMs);
}

/**
 * The 400 for an offer the WebRTC library threw on while applying it (werift, libdatachannel):
 * its message names the problem; the library's error is kept as `cause` for the log.
 */
export function offerRefused(err: unknown): SdpError {
  const message = (err instanceof Error ? err.message : String(err)).replace(/[\x00-\x1f\x7f]/g, ' ').slice(0, 200);
  return new SdpError('BAD_SDP', `the offer could not be applied: ${message || 'rejected by the WebRTC stack'}`, { cause: err });
}
