// The songs page: create a song, watch its place in line and render progress, then draw each
// take's waveform and play or download it. Talks only to the public Area A API.
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

function renderTakes(song) {
  const box = $('takes');
  box.replaceChildren();
  for (const take of song.takes) {
    const div = document.createElement('div');
    div.className = 'take';
    div.innerHTML = `<h3>Take ${take.n} <small>seed ${take.seed} · ${take.duration.toFixed(1)} s</small></h3>
      <canvas width="800" height="80" aria-label="waveform of take ${take.n}"></canvas>
      <audio controls preload="none" src="${take.mp3_url}"></audio>
      <p><a href="${take.mp3_url}" download>Download MP3</a> · <a href="${take.wav_url}" download>Download WAV</a></p>`;
    box.append(div);
    drawWaveform(div.querySelector('canvas'), take.waveform);
  }
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
  $('current').hidden = false;
  const song = await api(`/songs/${id}`);
  $('title').textContent = song.prompt;
  $('state').textContent = describe(song);
  $('state').dataset.status = song.status;
  $('progress').value = song.status === 'done' ? 1 : song.progress ?? 0;
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
  const body = { prompt: $('prompt').value, duration: Number($('duration').value), variations: Number($('variations').value), loop: $('loop').checked };
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
