/**
 * The page both live benchmarks drive in Chromium: the stamped canvas source (stampedFrames.ts),
 * a WHIP publisher, WHEP viewers (the first one reading the stamps back), and the direct
 * in-page baseline (two peer connections, no server).
 */
import { STAMPED_FRAMES_JS } from '../../test/helpers/stampedFrames.ts';

export const PAGE = `<!doctype html><html><body><canvas id="src"></canvas><video id="v" autoplay muted playsinline></video><canvas id="rd"></canvas><script>
${STAMPED_FRAMES_JS}
window.publish = async (url, token, codec) => {
  const pc = new RTCPeerConnection();
  const tr = pc.addTransceiver(window.srcStream.getVideoTracks()[0], { direction: 'sendonly' });
  tr.setCodecPreferences(RTCRtpSender.getCapabilities('video').codecs.filter((c) => c.mimeType === 'video/' + codec && (codec !== 'H264' || /packetization-mode=1/.test(c.sdpFmtpLine || ''))));
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp', Authorization: 'Bearer ' + token }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return res.status;
};
window.viewers = [];
window.play = async (url, attach) => {
  const pc = new RTCPeerConnection(); window.viewers.push(pc);
  pc.addTransceiver('video', { direction: 'recvonly' });
  if (attach) { const v = document.getElementById('v'); pc.ontrack = (e) => { v.srcObject = new MediaStream([e.track]); readStamps(v); }; }
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return res.status;
};
window.closeViewers = () => { for (const pc of window.viewers.splice(0)) pc.close(); };
window.direct = async (codec) => {
  const a = new RTCPeerConnection(), b = new RTCPeerConnection();
  a.onicecandidate = (e) => e.candidate && b.addIceCandidate(e.candidate);
  b.onicecandidate = (e) => e.candidate && a.addIceCandidate(e.candidate);
  const tr = a.addTransceiver(window.srcStream.getVideoTracks()[0], { direction: 'sendonly' });
  tr.setCodecPreferences(RTCRtpSender.getCapabilities('video').codecs.filter((c) => c.mimeType === 'video/' + codec && (codec !== 'H264' || /packetization-mode=1/.test(c.sdpFmtpLine || ''))));
  const v = document.getElementById('v');
  b.ontrack = (e) => { v.srcObject = new MediaStream([e.track]); readStamps(v); };
  await a.setLocalDescription(await a.createOffer()); await b.setRemoteDescription(a.localDescription);
  await b.setLocalDescription(await b.createAnswer()); await a.setRemoteDescription(b.localDescription);
  window.directPcs = [a, b];
};
window.takeRecv = () => window.recv.splice(0);
window.takeSent = () => [...window.sent.entries()];
</script></body></html>`;
