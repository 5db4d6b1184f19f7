/**
 * In-page JavaScript for latency measurements with real browsers: the publisher draws a 16-bit
 * frame counter as a 4×4 grid of black/white blocks on a canvas (30 fps) and remembers when it
 * drew each value; a viewer reads the counter back from every presented frame
 * (requestVideoFrameCallback → canvas). Both pages share the machine clock, so
 * latency = present time − draw time. Used by the live and outputs benchmarks and the HLS test.
 * Only a clean stamp is read (every block centre clearly black or white, one white at least): a
 * slate, a greyed or a garbled picture is counted in `unstamped`, not read as some old counter
 * (a garbled picture read as one made "latency" grow by a second a second).
 *
 * Defines on `window`: `sent` (counter → draw time), `recv` ([counter, present time]), `unstamped`,
 * `startSource(size, withAudio)` (sets `window.srcStream`), `readStamps(video)`, `takeLatencies()`,
 * the helper `gathered(pc)` (waits for ICE gathering: WHIP clients here never trickle) and
 * `publish(url, token)`, a non-trickle WHIP publish of `srcStream` (sets `pub`, `pubLocation`;
 * resolves with the status).
 */
export const STAMPED_FRAMES_JS = `
const GRID = 4;
window.sent = new Map(); window.recv = []; window.unstamped = 0;
window.startSource = async (size, withAudio) => {
  const c = document.getElementById('src'); c.width = size; c.height = size;
  const g = c.getContext('2d'); let n = 1;
  const draw = () => {
    const b = size / GRID;
    for (let i = 0; i < 16; i++) { g.fillStyle = (n >> i) & 1 ? '#fff' : '#000'; g.fillRect((i % GRID) * b, Math.floor(i / GRID) * b, b, b); }
    window.sent.set(n, performance.timeOrigin + performance.now());
    n = (n + 1) & 0xffff || 1;
  };
  draw(); setInterval(draw, 1000 / 30);
  const tracks = c.captureStream(30).getVideoTracks();
  if (withAudio) tracks.push(...(await navigator.mediaDevices.getUserMedia({ audio: true })).getAudioTracks());
  window.srcStream = new MediaStream(tracks);
};
async function gathered(pc) {
  if (pc.iceGatheringState === 'complete') return;
  await new Promise((r) => { pc.addEventListener('icegatheringstatechange', () => pc.iceGatheringState === 'complete' && r()); setTimeout(r, 2000); });
}
window.publish = async (url, token) => {
  const pc = new RTCPeerConnection(); window.pub = pc;
  for (const tr of window.srcStream.getTracks()) pc.addTransceiver(tr, { direction: 'sendonly', streams: [window.srcStream] });
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp', Authorization: 'Bearer ' + token }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  window.pubLocation = new URL(res.headers.get('location'), url).href;
  return res.status;
};
function readStamps(video) {
  const rd = document.getElementById('rd'); const g = rd.getContext('2d', { willReadFrequently: true });
  const onFrame = () => {
    const at = performance.timeOrigin + performance.now();
    const w = video.videoWidth, h = video.videoHeight;
    if (w > 0) {
      if (rd.width !== w) { rd.width = w; rd.height = h; }
      g.drawImage(video, 0, 0);
      const d = g.getImageData(0, 0, w, h).data; let n = 0, clean = true;
      for (let i = 0; i < 16; i++) {
        const x = Math.floor(((i % GRID) + 0.5) * w / GRID), y = Math.floor((Math.floor(i / GRID) + 0.5) * h / GRID);
        const o = (y * w + x) * 4, luma = 0.299 * d[o] + 0.587 * d[o + 1] + 0.114 * d[o + 2];
        if (luma > 160) n |= 1 << i;
        else if (luma >= 96) clean = false; // stamps are 0/255 (canvas) or 45/210 ± 20 (stampedH264)
      }
      if (clean && n !== 0) window.recv.push([n, at]); else window.unstamped++;
    }
    video.requestVideoFrameCallback(onFrame);
  };
  video.requestVideoFrameCallback(onFrame);
}
window.takeLatencies = () => {
  const out = [];
  for (const [n, at] of window.recv) { const s = window.sent.get(n); if (s !== undefined) out.push(at - s); }
  window.recv = [];
  return out;
};
`;
