// The live playground: create a stream (POST /v1/streams), publish the camera over WHIP, watch the
// output (WHEP, LL-HLS fallback), change params live over the stream's control WebSocket (through
// web/reverie-client.js; PATCH /v1/streams/{id} while the socket is down) and chart the status the
// socket pushes (GET /v1/streams/{id}/status when it is down), play one of the account's songs as
// the stream's soundtrack with its beat shown live, and map a feature of the sound to a param.
// Talks only to the public APIs (Area B, and Area A's song list) and the stream's own WHIP/WHEP/HLS URLs.
import { ReverieClient } from '/web/reverie-client.js';
import { describeState } from '/web/streamState.js';
import { hangUp, playHls, playLive, playbackUrls, publishWhip } from '/web/watch.js';

const $ = (id) => document.getElementById(id);
const keyInput = $('key');
keyInput.value = localStorage.getItem('reverie.key') ?? new URLSearchParams(location.hash.slice(1)).get('key') ?? '';
keyInput.addEventListener('change', () => localStorage.setItem('reverie.key', keyInput.value.trim()));

let stream = JSON.parse(localStorage.getItem('reverie.stream') ?? 'null');
let publisher = null;
let viewer = null;
let camera = null;
let statusTimer = null;
let control = null;
// Exposed for tests and for the curious: the last status, the changes sent (socket or PATCH) and
// how the last one went.
window.playground = { status: null, patches: 0, mode: 'off', copied: null, via: null, hlsErrors: [], soundtrack: null, beat: null, mapping: null };

/** The stream's control channel (reconnects by itself); closed when the stream ends. */
function openControl() {
  control?.close();
  control = null;
  if (!stream) return;
  const client = new ReverieClient({ baseUrl: location.origin, apiKey: keyInput.value.trim() });
  control = client.control(stream.id);
  control.addEventListener('error', (e) => {
    if (e.detail?.code === 'STREAMS/NOT_FOUND') control?.close();
  });
}

function showError(err) {
  $('error').hidden = !err;
  $('error').textContent = err ? err.message : '';
}

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: { authorization: `Bearer ${keyInput.value.trim()}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(json.error ? `${json.error}${json.code ? ` (${json.code})` : ''}` : `HTTP ${res.status}`);
  return json;
}

function setPill(id, text) {
  $(id).textContent = text;
}

function showStream() {
  const on = stream !== null;
  for (const id of ['live', 'controls', 'soundCard', 'statusCard', 'end', 'streamInfo', 'obs']) $(id).hidden = !on;
  if (!on) return;
  $('streamInfo').textContent = `Stream ${stream.id} — playback id ${stream.output_playback_id}.`;
  // What OBS (or any WHIP client) needs: the server URL and the bearer token.
  $('whipUrl').value = stream.whip_url ?? '';
  $('streamKey').value = stream.stream_key ?? '';
  // Previews take the stream's shape; the server letterboxes other shapes into it (docs/pages.md).
  const w = Number(stream.params?.width) || 512;
  const h = Number(stream.params?.height) || 512;
  document.documentElement.style.setProperty('--stream-aspect', `${w} / ${h}`);
  $('streamSize').textContent = `${w}×${h}`;
  $('share').href = `/web/watch.html?v=${encodeURIComponent(stream.output_playback_id)}`;
  $('record').checked = stream.record === true;
  $('livePrompt').value = typeof stream.params?.prompt === 'string' ? stream.params.prompt : $('prompt').value;
  if (stream.params?.seed !== undefined && typeof stream.params.seed === 'number') $('seed').value = stream.params.seed;
  if (typeof stream.params?.guidance_scale === 'number') $('guidance').value = stream.params.guidance_scale;
  if (typeof stream.params?.delta === 'number') $('delta').value = stream.params.delta;
  $('guidanceOut').textContent = $('guidance').value;
  $('deltaOut').textContent = $('delta').value;
  openControl();
  startStatus();
  void loadSongs();
}

// Copy buttons: the clipboard API where the page may use it, else select-and-copy.
for (const button of document.querySelectorAll('button[data-copy]')) {
  button.addEventListener('click', async () => {
    const input = $(button.dataset.copy);
    try {
      await navigator.clipboard.writeText(input.value);
    } catch {
      const type = input.type;
      input.type = 'text';
      input.select();
      document.execCommand('copy');
      input.type = type;
    }
    button.textContent = 'Copied';
    window.playground.copied = input.value;
    setTimeout(() => (button.textContent = 'Copy'), 1500);
  });
}

$('create').onclick = async () => {
  showError(null);
  localStorage.setItem('reverie.key', keyInput.value.trim());
  try {
    $('create').disabled = true;
    stream = await api('POST', '/v1/streams', { pipeline: 'streamdiffusion', name: 'playground', params: { model_id: $('model').value, prompt: $('prompt').value } });
    localStorage.setItem('reverie.stream', JSON.stringify(stream));
    showStream();
  } catch (err) {
    showError(err);
  } finally {
    $('create').disabled = false;
  }
};

$('end').onclick = async () => {
  showError(null);
  await stopPublishing();
  await hangUp(viewer);
  viewer = null;
  try {
    if (stream) await api('DELETE', `/v1/streams/${encodeURIComponent(stream.id)}`);
  } catch (err) {
    showError(err);
  }
  stream = null;
  control?.close();
  control = null;
  localStorage.removeItem('reverie.stream');
  clearInterval(statusTimer);
  showSoundtrack(null);
  showStream();
};

// ───────────── publish (WHIP)
$('publish').onclick = async () => {
  showError(null);
  try {
    setPill('pubState', 'starting');
    camera ??= await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480, frameRate: 30 }, audio: true });
    $('camera').srcObject = camera;
    publisher = await publishWhip(camera, stream.whip_url, stream.stream_key);
    publisher.pc.addEventListener('connectionstatechange', () => setPill('pubState', publisher?.pc.connectionState ?? 'off'));
    setPill('pubState', publisher.pc.connectionState);
    $('publish').hidden = true;
    $('unpublish').hidden = false;
    if (!viewer) void watch(false);
  } catch (err) {
    setPill('pubState', 'failed');
    showError(err);
  }
};

async function stopPublishing() {
  await hangUp(publisher);
  publisher = null;
  for (const track of camera?.getTracks() ?? []) track.stop();
  camera = null;
  $('camera').srcObject = null;
  setPill('pubState', 'off');
  $('publish').hidden = false;
  $('unpublish').hidden = true;
}
$('unpublish').onclick = () => void stopPublishing();

// ───────────── watch (WHEP, LL-HLS fallback)
async function watch(forceHls) {
  await hangUp(viewer);
  viewer = null;
  const urls = playbackUrls(stream.output_playback_id);
  const onMode = (mode, text) => {
    window.playground.mode = mode;
    setPill('outState', text);
  };
  try {
    viewer = forceHls ? await playHls($('output'), urls.hlsUrl, { onError: (e) => (window.playground.hlsErrors = [...window.playground.hlsErrors.slice(-19), e]) }) : await playLive($('output'), { ...urls, onMode });
    onMode(viewer.kind, viewer.kind === 'hls' ? 'LL-HLS' : 'WebRTC');
  } catch (err) {
    onMode('off', 'failed');
    showError(err);
  }
}
// ───────────── recording (PATCH record: true|false; the viewer page lists the recordings)
$('record').onchange = async () => {
  if (!stream) return;
  const on = $('record').checked;
  $('recordState').textContent = on ? 'Starting…' : 'Stopping…';
  try {
    stream = await api('PATCH', `/v1/streams/${encodeURIComponent(stream.id)}`, { record: on });
    localStorage.setItem('reverie.stream', JSON.stringify(stream));
    $('recordState').textContent = stream.record ? 'Recording: it starts with the next second of output.' : 'Not recording. Recordings are listed on the viewer page (Share link).';
  } catch (err) {
    $('record').checked = !on;
    $('recordState').textContent = '';
    showError(err);
  }
};

$('watch').onclick = () => void watch(false);
$('watchHls').onclick = () => void watch(true);

// ───────────── clips (POST /v1/streams/{id}/clips; the link comes from the key-less playback list)
/** Signed link of one of the stream's clips (valid 10 min), from the list the viewer page uses too. */
async function clipLink(clipId) {
  const res = await fetch(`/v1/playback/${encodeURIComponent(stream.output_playback_id)}/clips`);
  const json = await res.json().catch(() => ({}));
  return (json.data ?? []).find((c) => c.id === clipId)?.url ?? null;
}
$('clip').onclick = async () => {
  if (!stream) return;
  const state = $('clipState');
  $('clip').disabled = true;
  state.textContent = 'Clipping the last 10 s…';
  try {
    // Answers once the MP4 exists (about half a second), so the link works at once.
    const clip = await api('POST', `/v1/streams/${encodeURIComponent(stream.id)}/clips`, { seconds: 10 });
    const url = await clipLink(clip.id);
    state.textContent = '';
    const a = document.createElement('a');
    a.href = url ?? clip.mp4_url;
    a.target = '_blank';
    a.id = 'clipLink';
    a.dataset.clipId = clip.id;
    a.textContent = `Clip ready: ${clip.duration.toFixed(1)} s MP4`;
    state.append(a);
    window.playground.clips = (window.playground.clips ?? 0) + 1;
  } catch (err) {
    state.textContent = `No clip: ${err.message}`;
  } finally {
    $('clip').disabled = false;
  }
};

// ───────────── live params (control WebSocket; PATCH while it is down)
async function patch(params) {
  if (!stream) return;
  showError(null);
  $('patchState').textContent = 'Applying…';
  try {
    let how;
    if (control?.connected) {
      const ack = await control.update(params);
      stream = { ...stream, params: { ...stream.params, ...params } };
      how = ack.mode === 'reload' ? 'reloading the pipeline' : ack.frame ? `from frame ${ack.frame}` : 'next frame';
      window.playground.via = 'websocket';
    } else {
      stream = await api('PATCH', `/v1/streams/${encodeURIComponent(stream.id)}`, { params });
      how = 'over HTTP';
      window.playground.via = 'patch';
    }
    localStorage.setItem('reverie.stream', JSON.stringify(stream));
    window.playground.patches++;
    $('patchState').textContent = `Applied ${Object.keys(params).join(', ')} at ${new Date().toLocaleTimeString()} (${how}).`;
  } catch (err) {
    $('patchState').textContent = '';
    showError(err);
  }
}

function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

$('applyPrompt').onclick = () => void patch({ prompt: $('livePrompt').value });
$('livePrompt').addEventListener('keydown', (e) => e.key === 'Enter' && void patch({ prompt: $('livePrompt').value }));
$('seed').addEventListener('change', () => void patch({ seed: Number($('seed').value) }));
const patchSlider = debounce((name, value) => void patch({ [name]: value }), 250);
$('guidance').addEventListener('input', () => {
  $('guidanceOut').textContent = $('guidance').value;
  patchSlider('guidance_scale', Number($('guidance').value));
});
$('delta').addEventListener('input', () => {
  $('deltaOut').textContent = $('delta').value;
  patchSlider('delta', Number($('delta').value));
});
$('skipDiffusion').addEventListener('change', () => void patch({ skip_diffusion: $('skipDiffusion').checked }));
for (const box of document.querySelectorAll('#processors input[data-proc]')) {
  box.addEventListener('change', () => {
    const processors = [...document.querySelectorAll('#processors input[data-proc]:checked')].map((b) => ({ type: b.dataset.proc, enabled: true, params: JSON.parse(b.dataset.params) }));
    void patch({ image_preprocessing: { enabled: processors.length > 0, processors } });
  });
}

// ───────────── soundtrack (PUT/DELETE /v1/streams/{id}/soundtrack) and one audio mapping
/** The account's rendered songs by id, from Area A's list (newest first). */
let songs = new Map();
/** The soundtrack as the API last reported it (null: none), and when (this page's clock, ms). */
let soundtrack = null;
let soundtrackAt = 0;
let beatFrame = 0;

async function loadSongs() {
  const select = $('stSong');
  try {
    const list = ((await api('GET', '/music/v1/songs?limit=50')).songs ?? []).filter((s) => s.status === 'done');
    const chosen = select.value;
    songs = new Map(list.map((s) => [s.id, s]));
    select.replaceChildren(
      ...(list.length ? list : [null]).map((s) => {
        const o = document.createElement('option');
        o.value = s?.id ?? '';
        o.textContent = s ? `${s.prompt.slice(0, 48)} — ${s.bpm} BPM, ${Math.round(s.duration)} s` : '(no rendered songs yet: make one on the Songs page)';
        return o;
      }),
    );
    if (songs.has(chosen)) select.value = chosen;
    showTakes();
  } catch {
    // The list is a convenience: without it the card stays as it was.
  }
}

function showTakes() {
  const song = songs.get($('stSong').value);
  $('stTake').replaceChildren(
    ...Array.from({ length: song?.takes?.length || 1 }, (_, i) => {
      const o = document.createElement('option');
      o.value = o.textContent = String(i + 1);
      return o;
    }),
  );
}
$('stSong').addEventListener('change', showTakes);
$('stLoad').onclick = () => void loadSongs();

/** Shows the soundtrack's state; its beat runs on from the last report until the next. */
function showSoundtrack(data) {
  soundtrack = data;
  soundtrackAt = Date.now();
  window.playground.soundtrack = data;
  $('stState').textContent = data ? data.state : 'none';
  $('stState').dataset.tone = data?.state === 'playing' ? 'ok' : data ? 'busy' : '';
  $('stStop').hidden = !data;
  $('stPos').textContent = data ? `${data.position_s.toFixed(1)} of ${data.duration_s.toFixed(1)} s${data.loops ? `, loop ${data.loops + 1}` : ''}` : '';
  cancelAnimationFrame(beatFrame);
  if (data?.state === 'playing') beatFrame = requestAnimationFrame(drawBeat);
  else for (const dot of $('beat').children) dot.classList.remove('on');
}

/**
 * The beat now, from the reported position in the take and the song's tempo (a take starts on a
 * downbeat, 4 beats to the bar, and a looping take keeps its bar grid across the seam).
 */
function drawBeat() {
  const song = soundtrack && songs.get(soundtrack.song_id);
  if (!soundtrack || soundtrack.state !== 'playing' || !song) return;
  let pos = soundtrack.position_s + (Date.now() - soundtrackAt) / 1000;
  if (soundtrack.loop && soundtrack.duration_s > 0) pos %= soundtrack.duration_s;
  else pos = Math.min(pos, soundtrack.duration_s);
  const beat = Math.floor((pos * song.bpm) / 60);
  const inBar = beat % 4;
  [...$('beat').children].forEach((dot, i) => dot.classList.toggle('on', i === inBar));
  window.playground.beat = { beat, bar: Math.floor(beat / 4) + 1, beatInBar: inBar + 1, at: Date.now() };
  beatFrame = requestAnimationFrame(drawBeat);
}

async function refreshSoundtrack() {
  if (!stream) return;
  try {
    showSoundtrack((await api('GET', `/v1/streams/${encodeURIComponent(stream.id)}/soundtrack`)).data ?? null);
  } catch {
    // The next poll tries again; the status card shows what is wrong with the server.
  }
}

$('stPlay').onclick = async () => {
  showError(null);
  const songId = $('stSong').value;
  if (!stream || !songId) return showError(new Error('Pick a rendered song first (the Songs page makes them).'));
  try {
    const body = { song_id: songId, take: Number($('stTake').value), loop: $('stLoop').checked, gain_db: Number($('stGain').value), duck_publisher_db: Number($('stDuck').value) };
    const { data } = await api('PUT', `/v1/streams/${encodeURIComponent(stream.id)}/soundtrack`, body);
    showSoundtrack(data);
    // The stream's tempo becomes the song's, its downbeat where the take starts: "on the beat"
    // changes (the control socket's on_beat) then land on the beats this song plays.
    if (control?.connected) control.setTempo({ tempo_from_song: songId, phase: data.start_at });
  } catch (err) {
    showError(err);
  }
};

$('stStop').onclick = async () => {
  if (!stream) return;
  try {
    await api('DELETE', `/v1/streams/${encodeURIComponent(stream.id)}/soundtrack`);
    showSoundtrack(null);
  } catch (err) {
    showError(err);
  }
};

/** A range that suits each param, set when the param is picked (the server checks any other). */
const MAP_RANGES = { seed: [1, 100000], guidance_scale: [1, 1.8], delta: [0.3, 0.9] };
$('mapParam').addEventListener('change', () => {
  const [min, max] = MAP_RANGES[$('mapParam').value] ?? [0, 1];
  $('mapMin').value = String(min);
  $('mapMax').value = String(max);
});
$('mapApply').onclick = () =>
  void patch({
    audio_mappings: [{ source: $('mapSource').value, feature: $('mapFeature').value, param: $('mapParam').value, range: [Number($('mapMin').value), Number($('mapMax').value)], smoothing_ms: Number($('mapSmooth').value) }],
  });
$('mapClear').onclick = () => void patch({ audio_mappings: [] });

/** The mapping's feature (0–1) and the value it gave its param, from the status. */
function showMapping(status) {
  const m = status?.audio_mappings?.[0] ?? null;
  window.playground.mapping = m;
  $('mapMeter').style.width = `${Math.round((m?.feature_value ?? 0) * 100)}%`;
  $('mapValue').textContent = m && m.value !== null ? `${m.param} ${Number.isInteger(m.value) ? m.value : m.value.toFixed(3)}` : '–';
}

// ───────────── status (GET every second) as sparklines
const series = { in: [], out: [], lat: [], rtt: [], loss: [] };
const MAX_POINTS = 60;

function spark(id, values) {
  const c = $(id);
  const w = (c.width = c.clientWidth || 200);
  const h = (c.height = c.clientHeight || 48);
  const g = c.getContext('2d');
  g.clearRect(0, 0, w, h);
  const finite = values.filter(Number.isFinite);
  if (finite.length < 2) return;
  const max = Math.max(...finite, 1);
  g.strokeStyle = getComputedStyle(document.documentElement).getPropertyValue('--accent') || '#7c5cff';
  g.lineWidth = 2;
  g.beginPath();
  // Gaps (unmeasured points) break the line instead of dropping it to 0.
  let pen = false;
  values.forEach((v, i) => {
    if (!Number.isFinite(v)) {
      pen = false;
      return;
    }
    const x = (i / (MAX_POINTS - 1)) * w;
    const y = h - 2 - (v / max) * (h - 4);
    if (pen) g.lineTo(x, y);
    else g.moveTo(x, y);
    pen = true;
  });
  g.stroke();
}

/**
 * Adds a point to a chart. A value that is not measured (NaN: no publisher, not watching, no RTCP
 * yet) is not drawn as 0: the chart stays hidden until it has a measurement, and shows '–' (not
 * 0.0) while the measurement is missing later.
 */
function push(name, value, label, digits = 1) {
  const s = series[name];
  s.push(value);
  if (s.length > MAX_POINTS) s.shift();
  const measured = s.some(Number.isFinite);
  $(`f-${name}`).hidden = !measured;
  $(`v-${name}`).textContent = Number.isFinite(value) ? value.toFixed(digits) : '–';
  if (measured) spark(`c-${name}`, s);
  $('noMetrics').hidden = Object.values(series).some((v) => v.some(Number.isFinite));
}

/** The WHEP viewer's own playout delay: jitter buffer + decode, from getStats (ms). */
async function viewerDelayMs() {
  if (!viewer || viewer.kind !== 'whep') {
    const hls = viewer?.hls;
    return hls && Number.isFinite(hls.latency) ? hls.latency * 1000 : NaN;
  }
  let delay = NaN;
  (await viewer.pc.getStats()).forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'video' && s.jitterBufferEmittedCount > 0) delay = (s.jitterBufferDelay / s.jitterBufferEmittedCount) * 1000;
  });
  return delay;
}

/** The status: what the socket pushed (with its latest per-second rates), else one GET. */
async function currentStatus() {
  if (control?.connected && control.status) {
    const s = control.status;
    const rates = control.stats ? { input_fps: control.stats.input_fps, output_fps: control.stats.output_fps } : {};
    return { ...s, state: control.stats?.state ?? s.state, inference_status: { ...s.inference_status, ...rates } };
  }
  return (await api('GET', `/v1/streams/${encodeURIComponent(stream.id)}/status`)).data;
}

async function pollStatus() {
  if (!stream) return;
  try {
    const data = await currentStatus();
    window.playground.status = data;
    const inf = data?.inference_status ?? {};
    const stats = data?.gateway_status?.ingest_metrics?.stats ?? {};
    const video = (stats.track_stats ?? []).find((t) => t.type === 'video') ?? (stats.track_stats ?? [])[0] ?? {};
    const words = describeState(data, Date.now());
    setPill('state', words.word);
    $('state').dataset.tone = words.tone;
    $('state').dataset.state = data?.state ?? '';
    $('state').title = data?.state ?? '';
    $('stateDetail').textContent = words.detail;
    $('demoBadge').hidden = data?.demo !== true;
    // Rates exist only while a pipeline runs; ingest numbers only with a publisher's RTCP.
    const running = data?.state && data.state !== 'OFFLINE';
    const hasTrack = Object.keys(video).length > 0;
    push('in', running ? (inf.input_fps ?? NaN) : NaN);
    push('out', running ? (inf.output_fps ?? NaN) : NaN);
    push('lat', await viewerDelayMs(), 0);
    push('rtt', hasTrack && Number.isFinite(video.rtt) && video.rtt > 0 ? video.rtt * (video.rtt < 10 ? 1000 : 1) : NaN, 0);
    push('loss', hasTrack && Number.isFinite(video.packet_loss_pct) ? video.packet_loss_pct : NaN, 'loss', 2);
    showMapping(data);
    void refreshSoundtrack();
    $('quality').textContent = stats.conn_quality ?? '–';
    $('lastError').textContent = inf.last_error ? `Last error: ${inf.last_error}` : '';
  } catch (err) {
    setPill('state', 'Status unavailable');
    $('state').dataset.tone = 'warn';
    $('lastError').textContent = err.message;
  }
}

function startStatus() {
  clearInterval(statusTimer);
  statusTimer = setInterval(() => void pollStatus(), 1000);
  void pollStatus();
}

window.addEventListener('pagehide', () => {
  control?.close();
  void hangUp(publisher);
  void hangUp(viewer);
});
showStream();
