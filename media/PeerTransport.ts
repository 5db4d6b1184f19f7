/**
 * werift peer connections as WHIP/WHEP need them: one codec set per role, host candidates on the
 * configured addresses and UDP port range, and a non-trickle answer (RFC 9725 §4.3.1: the server
 * gathers every candidate before answering; OBS never trickles and gathers only after the answer).
 */
import { RTCPeerConnection, RTCRtpCodecParameters, type RTCIceServer } from 'werift';
import { filterAnswerCandidates, type OfferRole } from './Sdp.ts';

export interface TransportOptions {
  /** Only these addresses are advertised as host candidates (and gathered on). Default: all. */
  iceAddresses?: string[];
  /** Inclusive UDP port range for ICE, e.g. [40000, 40999]. Default: ephemeral ports. */
  udpPortRange?: [number, number];
  /**
   * Advertised to clients (Link headers) but not used for the node's own gathering: a media node
   * has a routable host address (iceAddresses), and waiting on STUN/TURN while OBS's 8 s POST
   * timeout runs would only delay the answer.
   */
  iceServers?: RTCIceServer[];
}

const FEEDBACK = [{ type: 'nack' }, { type: 'nack', parameter: 'pli' }, { type: 'ccm', parameter: 'fir' }];

function codecs(role: OfferRole) {
  const opus = new RTCRtpCodecParameters({ mimeType: 'audio/opus', clockRate: 48000, channels: 2 });
  const h264 = new RTCRtpCodecParameters({
    mimeType: 'video/H264',
    clockRate: 90000,
    rtcpFeedback: FEEDBACK,
    parameters: 'profile-level-id=42e01f;packetization-mode=1;level-asymmetry-allowed=1',
  });
  const vp8 = new RTCRtpCodecParameters({ mimeType: 'video/VP8', clockRate: 90000, rtcpFeedback: FEEDBACK });
  // Offers reach werift cut down to one video codec (Sdp.ts), so the order here picks nothing.
  return { audio: [opus], video: role === 'whip' ? [vp8, h264] : [h264, vp8] };
}

export function createPeerConnection(role: OfferRole, opts: TransportOptions): RTCPeerConnection {
  const loopback = (opts.iceAddresses ?? []).filter((a) => a.startsWith('127.') || a === '::1');
  return new RTCPeerConnection({
    codecs: codecs(role),
    iceServers: [],
    icePortRange: opts.udpPortRange,
    // werift skips loopback when gathering; addresses named explicitly must still be offered.
    iceAdditionalHostAddresses: loopback.length > 0 ? loopback : undefined,
    iceUseIpv6: (opts.iceAddresses ?? []).some((a) => a.includes(':')) || opts.iceAddresses === undefined,
    bundlePolicy: 'max-bundle',
  });
}

/**
 * Applies the (already prepared) offer, answers, waits for ICE gathering to complete and returns
 * the answer SDP holding every candidate. Rejects if gathering takes longer than `timeoutMs`.
 */
export async function answerWithAllCandidates(
  pc: RTCPeerConnection,
  offerSdp: string,
  iceAddresses: string[] | undefined,
  timeoutMs: number,
): Promise<string> {
  await pc.setRemoteDescription({ type: 'offer', sdp: offerSdp });
  const answer = await pc.createAnswer();
  await pc.setLocalDescription(answer);
  if (pc.iceGatheringState !== 'complete') {
    await pc.iceGatheringStateChange.watch((state) => state === 'complete', timeoutMs);
  }
  const sdp = pc.localDescription?.sdp;
  if (!sdp) throw new Error('no local description after gathering');
  return filterAnswerCandidates(sdp, iceAddresses);
}
