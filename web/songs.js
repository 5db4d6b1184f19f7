// The songs page: create a song (optionally with a section plan and stems), watch its place in
// line and render progress, then draw each take's waveform under its section plan, play or
// download it (MP3, WAV, MIDI, stems), and solo/mute its stems in the browser (Web Audio).
// Talks only to the public Area A API.
const base = document.querySelector('meta[name="music-base"]')?.content ?? '/music/v1';
const $ = (id) => document.getElementById(id);
const keyInput = $('key');
keyInput.value = localStorage.getItem('reverie.key') ?? new URLSearchParams(location.hash.slice(1)).get('key') ?? '';

async function api(path, init = {}) {
  const res = await fetch(`${base}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${keyInput.value.trim()}`, ...(init.body ? { 'content-type': 'application/json' } : {}) },
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw Object.assign(new Error(body.message ?? `HTTP ${res.status}`), { status: res.status, body });
  return body;
}

function showError(err) {
  $('error').hidden = !err;
  $('error').textContent = err ? err.message : '';
}

async function refreshUsage() {
  try {
    const u = await api('/usage');
    $('usage').textContent = `Plan ${u.plan}: ${u.used} of ${u.limit ?? 'unlimited'} songs used this month (resets ${new Date(u.resets_at).toLocaleDateString()}).`;
  } catch {
    $('usage').textContent = '';
  }
}

function drawWaveform(canvas, peaks) {
  const ctx = canvas.getContext('2d');
  const { width, height } = canvas;
  ctx.clearRect(0, 0, width, height);
  ctx.fillStyle = '#7c5cff';
  const w = width / peaks.length;
  peaks.forEach((p, i) => {
    const h = Math.max(1, p * height);
    ctx.fillRect(i * w, (height - h) / 2, Math.max(1, w - 1), h);
  });
}

/** Section bands laid over the waveform: each as wide as its bars, labelled with its name. */
function sectionBands(sections) {
  const total = sections.reduce((s, x) => s + x.bars, 0) || 1;
  const band = document.createElement('div');
  band.className = 'sections';
  for (const s of sections) {
    const el = document.createElement('span');
    el.className = 'section';
    el.dataset.name = s.name;
    el.dataset.bars = String(s.bars);
    el.style.left = `${(s.start_bar / total) * 100}%`;
    el.style.width = `${(s.bars / total) * 100}%`;
    el.style.setProperty('--energy', String(s.energy));
    el.title = `${s.name}: ${s.bars} bars, energy ${s.energy}${s.style ? `, ${s.style}` : ''}`;
    el.textContent = s.name;
    band.append(el);
  }
  return band;
}

const STEMS = ['drums', 'bass', 'chords', 'lead', 'effects'];

/**
 * Plays a take's stems in sync through one gain per stem. Solo wins over mute: when any stem is
 * soloed only soloed stems sound; otherwise every unmuted stem does.
 */
class StemPlayer {
  constructor(urls, row) {
    this.urls = urls;
    this.row = row;
    this.ctx = null;
    this.buffers = null;
    this.sources = [];
    this.state = Object.fromEntries(STEMS.map((s) => [s, { mute: false, solo: false }]));
  }

  async load() {
    this.ctx ??= new AudioContext();
    this.gains = Object.fromEntries(STEMS.map((s) => {
      const g = this.ctx.createGain();
      g.connect(this.ctx.destination);
      return [s, g];
    }));
    // Fetch follows the stable URL's redirect to its signed link.
    const decoded = await Promise.all(STEMS.map(async (s) => this.ctx.decodeAudioData(await (await fetch(this.urls[s])).arrayBuffer())));
    this.buffers = Object.fromEntries(STEMS.map((s, i) => [s, decoded[i]]));
    this.apply();
    this.row.dataset.loaded = 'true';
  }

  play() {
    this.stop();
    const at = this.ctx.currentTime + 0.05;
    this.sources = STEMS.map((s) => {
      const src = this.ctx.createBufferSource();
      src.buffer = this.buffers[s];
      src.connect(this.gains[s]);
      src.start(at);
      return src;
    });
    this.row.dataset.playing = 'true';
  }

  stop() {
    for (const src of this.sources) src.stop();
    this.sources = [];
    this.row.dataset.playing = 'false';
  }

  toggle(stem, what) {
    this.state[stem][what] = !this.state[stem][what];
    this.apply();
  }

  apply() {
    const anySolo = STEMS.some((s) => this.state[s].solo);
    for (const s of STEMS) {
      const audible = anySolo ? this.state[s].solo : !this.state[s].mute;
      if (this.gains) this.gains[s].gain.value = audible ? 1 : 0;
      const el = this.row.querySelector(`[data-stem="${s}"]`);
      el.dataset.gain = String(this.gains ? this.gains[s].gain.value : audible ? 1 : 0);
      el.querySelector('.mute').setAttribute('aria-pressed', String(this.state[s].mute));
      el.querySelector('.solo').setAttribute('aria-pressed', String(this.state[s].solo));
    }
  }
}

function stemControls(take) {
  const box = document.createElement('div');
  box.className = 'stems';
  box.innerHTML = `<p><button type="button" class="load">Load stems</button> <button type="button" class="play" disabled>Play stems</button>
      <button type="button" class="stop" disabled>Stop</button> · <a href="${take.stems_zip_url}" download>All stems (zip)</a></p>
    <ul>${STEMS.map((s) => `<li data-stem="${s}"><span>${s}</span>
      <button type="button" class="mute" aria-pressed="false">Mute</button>
      <button type="button" class="solo" aria-pressed="false">Solo</button>
      <a href="${take.stems[s]}" download>WAV</a></li>`).join('')}</ul>`;
  const player = new StemPlayer(take.stems, box);
  box.querySelector('.load').onclick = async () => {
    box.querySelector('.load').disabled = true;
    try {
      await player.load();
      box.querySelector('.play').disabled = false;
      box.querySelector('.stop').disabled = false;
    } catch (err) {
      showError(err);
      box.querySelector('.load').disabled = false;
    }
  };
  box.querySelector('.play').onclick = () => player.play();
  box.querySelector('.stop').onclick = () => player.stop();
  for (const li of box.querySelectorAll('li')) {
    li.querySelector('.mute').onclick = () => player.toggle(li.dataset.stem, 'mute');
    li.querySelector('.solo').onclick = () => player.toggle(li.dataset.stem, 'solo');
  }
  player.apply();
  return box;
}

/**
 * Takes being played while the song still renders (progressive MP3), by take number. When the
 * song is done the same element moves into its take, so playback is not interrupted.
 */
const liveAudio = new Map();

function playWhileRendering(song) {
  for (const url of song.streaming_mp3_urls ?? []) {
    const n = Number(/\/(\d)\.mp3$/.exec(url)?.[1]);
    if (liveAudio.has(n)) continue;
    const audio = document.createElement('audio');
    audio.controls = true;
    audio.className = 'live';
    audio.dataset.take = String(n);
    audio.addEventListener('playing', () => { audio.dataset.playing = 'true'; });
    audio.src = url;
    liveAudio.set(n, audio);
    const p = document.createElement('p');
    p.className = 'hint';
    p.textContent = `Take ${n}, playing while the song renders:`;
    $('takes').append(p, audio);
    audio.play().catch(() => { /* autoplay refused: the controls are there */ });
  }
}

function renderTakes(song) {
  const box = $('takes');
  box.replaceChildren();
  for (const take of song.takes) {
    const div = document.createElement('div');
    div.className = 'take';
    div.innerHTML = `<h3>Take ${take.n} <small>seed ${take.seed} · ${take.duration.toFixed(1)} s</small></h3>
      <div class="wave"><canvas width="800" height="80" aria-label="waveform of take ${take.n}"></canvas></div>
      <audio controls preload="none" src="${take.mp3_url}"></audio>
      <p class="downloads"><a href="${take.mp3_url}" download>Download MP3</a> · <a href="${take.wav_url}" download>Download WAV</a>${
        take.midi_url ? ` · <a href="${take.midi_url}" download>Download MIDI</a>` : ''}</p>`;
    const live = liveAudio.get(take.n);
    if (live) div.querySelector('audio').replaceWith(live);
    box.append(div);
    if (song.sections?.length) div.querySelector('.wave').append(sectionBands(song.sections));
    drawWaveform(div.querySelector('canvas'), take.waveform);
    if (take.stems) div.append(stemControls(take));
  }
}

/** `name bars energy [style words]` per line → the API's sections list (null when empty). */
function parseSections(text) {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  if (lines.length === 0) return null;
  return lines.map((line) => {
    const [name, bars, energy, ...style] = line.split(/\s+/);
    const s = { name, bars: Number(bars), energy: Number(energy) };
    if (style.length) s.style = style.join(' ');
    return s;
  });
}

function describe(song) {
  switch (song.status) {
    case 'queued': return `In line: position ${song.position ?? '…'}`;
    case 'rendering': return `Rendering… ${Math.round(song.progress * 100)}%`;
    case 'done': return `Done: ${song.bpm} bpm${song.key ? `, ${song.key}` : ''}.`;
    case 'failed': return `Failed: ${song.error?.message ?? 'unknown error'}`;
  }
  return song.status;
}

let polling = null;
async function follow(id) {
  clearTimeout(polling);
  if (follow.current !== id) {
    follow.current = id;
    for (const a of liveAudio.values()) a.pause();
    liveAudio.clear();
  }
  $('current').hidden = false;
  const song = await api(`/songs/${id}`);
  $('title').textContent = song.prompt;
  $('state').textContent = describe(song);
  $('state').dataset.status = song.status;
  $('progress').value = song.status === 'done' ? 1 : song.progress ?? 0;
  if (song.status === 'rendering') playWhileRendering(song);
  if (song.status === 'done') renderTakes(song);
  if (song.status === 'queued' || song.status === 'rendering') polling = setTimeout(() => follow(id).catch(showError), 2000); // spec: poll every 2 s
  else {
    refreshUsage();
    refreshRecent();
  }
}

async function refreshRecent() {
  try {
    const { songs } = await api('/songs?limit=10');
    $('recent').replaceChildren(...songs.map((s) => {
      const li = document.createElement('li');
      const a = document.createElement('a');
      a.href = '#';
      a.textContent = `${s.prompt} — ${s.status}`;
      a.onclick = (e) => { e.preventDefault(); follow(s.id).catch(showError); };
      li.append(a);
      return li;
    }));
  } catch { /* no key yet */ }
}

$('create').addEventListener('submit', async (e) => {
  e.preventDefault();
  showError(null);
  localStorage.setItem('reverie.key', keyInput.value.trim());
  const body = { prompt: $('prompt').value, variations: Number($('variations').value), loop: $('loop').checked, stems: $('stems').checked };
  const sections = parseSections($('sections').value);
  if (sections) body.sections = sections;
  else body.duration = Number($('duration').value);
  if ($('bpm').value) body.bpm = Number($('bpm').value);
  if ($('seed').value) body.seed = Number($('seed').value);
  $('go').disabled = true;
  try {
    const song = await api('/songs', { method: 'POST', body: JSON.stringify(body) });
    await follow(song.id);
  } catch (err) {
    showError(err);
  } finally {
    $('go').disabled = false;
  }
});

keyInput.addEventListener('change', () => { refreshUsage(); refreshRecent(); });
refreshUsage();
refreshRecent();
