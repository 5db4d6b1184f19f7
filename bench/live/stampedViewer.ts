/**
 * A Chromium page that plays one WHEP URL (`play(url)`) and reads the stamped frame counter back
 * from every presented frame (`takeRecv()`: [counter, ms epoch] pairs), with the video's inbound
 * bytes and decoded frames (`inbound()`). Benchmarks serve it from loopback.
 */
import { STAMPED_FRAMES_JS } from '../../test/helpers/stampedFrames.ts';

export const VIEWER_PAGE = `<!doctype html><html><body><video id="v" autoplay muted playsinline></video><canvas id="rd"></canvas><script>
${STAMPED_FRAMES_JS}
window.play = async (url) => {
  const pc = new RTCPeerConnection(); window.pc = pc;
  pc.addTransceiver('video', { direction: 'recvonly' });
  const v = document.getElementById('v');
  pc.ontrack = (e) => { v.srcObject = new MediaStream([e.track]); readStamps(v); };
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return res.status;
};
window.takeRecv = () => window.recv.splice(0);
window.inbound = async () => { let out = { bytes: 0, frames: 0 }; (await window.pc.getStats()).forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') out = { bytes: s.bytesReceived, frames: s.framesDecoded }; }); return out; };
</script></body></html>`;
