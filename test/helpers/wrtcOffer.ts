/**
 * A real libwebrtc offer (node-webrtc: the browser's own SDP writer) with one audio and one video
 * m-line, for tests that need an offer the server must accept without running a whole peer.
 */
import wrtc from '@roamhq/wrtc';

/** The offer of a fresh peer connection; the peer closes at teardown. */
export async function realOffer(t: { teardown(fn: () => unknown): void }, direction: 'sendonly' | 'recvonly' = 'sendonly'): Promise<string> {
  const pc = new wrtc.RTCPeerConnection();
  t.teardown(() => pc.close());
  pc.addTransceiver('audio', { direction });
  pc.addTransceiver('video', { direction });
  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  return offer.sdp ?? '';
}
