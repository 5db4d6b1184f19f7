// Live playback for the playground and the viewer page: WHEP first (lowest latency), then LL-HLS
// through hls.js (/web/vendor/hls.min.js, loaded on demand) or the browser's native HLS.
// Also a minimal non-trickle WHIP/WHEP client: gather every candidate, then POST once.

/** Resolves once ICE gathering is complete (2 s at most: host candidates come first). */
export async function gathered(pc) {
  if (pc.iceGatheringState === 'complete') return;
  await new Promise((resolve) => {
    const done = () => pc.iceGatheringState === 'complete' && resolve();
    pc.addEventListener('icegatheringstatechange', done);
    setTimeout(resolve, 2000);
  });
}

/** POSTs the offer (WHIP or WHEP) and applies the answer; returns the session URL for DELETE. */
export async function exchange(pc, url, token) {
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const headers = { 'content-type': 'application/sdp' };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await fetch(url, { method: 'POST', headers, body: pc.localDescription.sdp });
  const body = await res.text();
  if (res.status !== 201) throw new Error(`${url.includes('/whip') ? 'WHIP' : 'WHEP'} ${res.status}: ${body.trim()}`);
  await pc.setRemoteDescription({ type: 'answer', sdp: body });
  return new URL(res.headers.get('location') ?? '', url).toString();
}

/** Ends a WHIP/WHEP session (DELETE on its Location; a publisher's with its stream key) and closes the peer connection. */
export async function hangUp(session) {
  if (!session) return;
  session.pc.close();
  const headers = session.token ? { authorization: `Bearer ${session.token}` } : {};
  if (session.url) await fetch(session.url, { method: 'DELETE', headers }).catch(() => {});
}

/** Publishes a MediaStream over WHIP. */
export async function publishWhip(stream, whipUrl, streamKey) {
  const pc = new RTCPeerConnection();
  for (const track of stream.getTracks()) pc.addTransceiver(track, { direction: 'sendonly', streams: [stream] });
  return { pc, url: await exchange(pc, whipUrl, streamKey), token: streamKey };
}

/** Plays WHEP into `video`; resolves once the first frame is shown, rejects after `timeoutMs`. */
export async function playWhep(video, whepUrl, timeoutMs = 8000) {
  const pc = new RTCPeerConnection();
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  const media = new MediaStream();
  pc.ontrack = (e) => {
    media.addTrack(e.track);
    video.srcObject = media;
    video.play().catch(() => {});
  };
  const session = { pc, url: null, kind: 'whep' };
  try {
    session.url = await exchange(pc, whepUrl);
    await firstFrame(video, timeoutMs);
    return session;
  } catch (err) {
    await hangUp(session);
    throw err;
  }
}

function firstFrame(video, timeoutMs) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no video within ' + timeoutMs / 1000 + ' s')), timeoutMs);
    video.requestVideoFrameCallback(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

let hlsScript = null;
function loadHlsJs() {
  hlsScript ??= new Promise((resolve, reject) => {
    const s = document.createElement('script');
    s.src = '/web/vendor/hls.min.js';
    s.onload = () => resolve(window.Hls);
    s.onerror = () => reject(new Error('could not load hls.js'));
    document.head.append(s);
  });
  return hlsScript;
}

/**
 * Plays LL-HLS into `video` (hls.js with lowLatencyMode, or native HLS in Safari); resolves once
 * the first frame is shown. Rejects after `timeoutMs` (default 20 s) or when hls.js gives up, with
 * the last hls.js errors in the message. `onError(text)` sees every hls.js error as it happens.
 */
export async function playHls(video, hlsUrl, { timeoutMs = 20000, onError = () => {} } = {}) {
  video.srcObject = null;
  const Hls = await loadHlsJs().catch(() => null);
  let hls = null;
  const errors = [];
  /** Destroyed: a recovery still pending must not touch it. */
  let gone = false;
  let failed = null;
  const gaveUp = new Promise((_, reject) => (failed = reject));
  gaveUp.catch(() => {});
  if (Hls?.isSupported()) {
    // Playlists, blocking reloads included, and parts are retried as patiently as the first manifest: the
    // manifest answers 404 until the first keyframe, and a busy node may answer a blocking reload
    // late. hls.js's defaults (2 retries) end playback for good after a few slow answers.
    const patient = { default: { maxTimeToFirstByteMs: 15000, maxLoadTimeMs: 20000, timeoutRetry: { maxNumRetry: 5, retryDelayMs: 1000, maxRetryDelayMs: 4000 }, errorRetry: { maxNumRetry: 10, retryDelayMs: 1000, maxRetryDelayMs: 4000 } } };
    // After a stall (a late part, a cache's lock wait) hls.js resumes where it stopped, behind the live
    // edge for good; up to 1.5× speed it plays back to its target latency instead.
    hls = new Hls({ lowLatencyMode: true, maxLiveSyncPlaybackRate: 1.5, backBufferLength: 10, manifestLoadPolicy: patient, playlistLoadPolicy: patient, fragLoadPolicy: patient });
    // hls.js starts on a key frame, up to a GOP (≈ 1 s) behind its target latency (PART-HOLD-BACK), and
    // plays faster only with a second of buffer ahead, which a player that close to the edge never has:
    // it stayed 0.1–0.5 s behind its target for good. Further than 0.2 s behind it, it jumps to the
    // target instead (a seek inside what it holds; hls.js raises the target itself after a stall).
    hls.on(Hls.Events.LEVEL_UPDATED, () => {
      if (hls.targetLatency) hls.config.liveMaxLatencyDuration = hls.targetLatency + 0.2;
    });
    let recoveries = 0;
    hls.on(Hls.Events.ERROR, (_event, data) => {
      const text = `${data.details}${data.response?.code ? ` (HTTP ${data.response.code})` : ''}${data.fatal ? ', fatal' : ''}`;
      errors.push(text);
      if (errors.length > 5) errors.shift();
      onError(text);
      if (!data.fatal) return;
      // hls.js's recovery for fatal errors: load again after a network error, rebuild the media
      // buffer after a media error (a few times each); the rest, and a manifest that never came, end it.
      const manifest = /^manifest/.test(data.details);
      // (A second apart: loading again at once fails again at once while the origin is down.)
      if (recoveries++ < 5 && data.type === Hls.ErrorTypes.NETWORK_ERROR && !manifest) setTimeout(() => !gone && hls.startLoad(), 1000);
      else if (recoveries <= 5 && data.type === Hls.ErrorTypes.MEDIA_ERROR) hls.recoverMediaError();
      else failed(new Error(`LL-HLS failed: ${errors.join('; ')}`));
    });
    hls.loadSource(hlsUrl);
    hls.attachMedia(video);
  } else if (video.canPlayType('application/vnd.apple.mpegurl')) {
    video.src = hlsUrl;
  } else {
    throw new Error('this browser plays neither WebRTC nor HLS');
  }
  video.play().catch(() => {});
  try {
    await Promise.race([firstFrame(video, timeoutMs), gaveUp]);
  } catch (err) {
    gone = true;
    hls?.destroy();
    const state = `video readyState ${video.readyState}, networkState ${video.networkState}${video.error ? `, error ${video.error.message}` : ''}`;
    const seen = errors.length && !err.message.startsWith('LL-HLS failed') ? `; hls.js: ${errors.join('; ')}` : '';
    throw new Error(`${err.message} (${state}${seen})`);
  }
  return { kind: 'hls', hls, pc: { close: () => ((gone = true), hls?.destroy()) }, url: null };
}

/** WHEP first; LL-HLS if WHEP fails or shows nothing. `onMode(kind, detail)` reports progress. */
export async function playLive(video, { whepUrl, hlsUrl, onMode = () => {} }) {
  try {
    onMode('connecting', 'WebRTC (WHEP)…');
    const s = await playWhep(video, whepUrl);
    onMode('whep', 'WebRTC (WHEP)');
    return s;
  } catch (err) {
    onMode('connecting', `WHEP failed (${err.message}); trying LL-HLS…`);
    const s = await playHls(video, hlsUrl);
    onMode('hls', 'LL-HLS');
    return s;
  }
}

/** Playback URLs of a playback id on this origin. */
export function playbackUrls(playbackId) {
  return {
    whepUrl: `${location.origin}/live/${encodeURIComponent(playbackId)}/whep`,
    hlsUrl: `${location.origin}/hls/${encodeURIComponent(playbackId)}/master.m3u8`,
  };
}
