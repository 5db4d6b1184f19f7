// The viewer page's list of a stream's recordings, with a download and a play button each.
// Recordings belong to the stream's account, so the list needs its API key: the one the
// playground keeps in this browser (same origin, localStorage `reverie.key`) or `#key=` in the
// address; the stream is the playground's (`reverie.stream`, matched by playback id) or `&s=`.
// Without both the section stays hidden: a public viewer sees the live output only.

const fmtBytes = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(1)} GB` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${Math.round(n / 1e3)} kB`);
const fmtTime = (s) => `${Math.floor(s / 60)}:${String(Math.floor(s % 60)).padStart(2, '0')}`;
const STATE_TEXT = { recording: 'recording now', complete: 'complete', interrupted: 'interrupted (plays up to where it stopped)' };

/** The API key and stream id this browser holds for `playbackId`, or null. */
export function ownerOf(playbackId) {
  const hashKey = new URLSearchParams(location.hash.slice(1)).get('key');
  const key = hashKey || localStorage.getItem('reverie.key');
  let streamId = new URLSearchParams(location.search).get('s');
  if (!streamId) {
    try {
      const s = JSON.parse(localStorage.getItem('reverie.stream') ?? 'null');
      if (s?.output_playback_id === playbackId) streamId = s.id;
    } catch {
      // not ours
    }
  }
  return key && streamId ? { key, streamId } : null;
}

async function call(owner, path) {
  const res = await fetch(path, { headers: { authorization: `Bearer ${owner.key}` } });
  const json = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(json.error ?? `HTTP ${res.status}`);
  return json;
}

/**
 * Fills `list` (a <ul>) with the stream's recordings, newest first; `onPlay(hlsUrl, rec)` plays
 * one. Returns the recordings shown, or null when this browser is not the stream's owner.
 */
export async function showRecordings({ playbackId, section, list, hint, onPlay }) {
  const owner = ownerOf(playbackId);
  section.hidden = owner === null;
  if (!owner) return null;
  const base = `/v1/streams/${encodeURIComponent(owner.streamId)}/recordings`;
  let recs;
  try {
    recs = (await call(owner, base)).data;
  } catch (err) {
    hint.textContent = `Could not list the recordings: ${err.message}`;
    return [];
  }
  hint.textContent = recs.length === 0 ? 'No recordings yet. Turn on "Record the output" in the playground.' : `${recs.length} recording${recs.length === 1 ? '' : 's'}, newest first.`;
  list.replaceChildren(
    ...recs.map((rec) => {
      const li = document.createElement('li');
      li.dataset.id = rec.id;
      li.dataset.state = rec.state;
      const text = document.createElement('span');
      text.textContent = `${new Date(rec.started_at).toLocaleString()} · ${fmtTime(rec.duration)} · ${fmtBytes(rec.size)} · ${STATE_TEXT[rec.state] ?? rec.state}`;
      const links = async () => call(owner, `${base}/${encodeURIComponent(rec.id)}/links`);
      const download = document.createElement('button');
      download.type = 'button';
      download.className = 'download';
      download.textContent = 'Download MP4';
      download.disabled = rec.segments === 0;
      download.onclick = async () => {
        download.disabled = true;
        try {
          const { mp4_url: url } = await links();
          window.recordings.lastDownload = url;
          const a = document.createElement('a');
          a.href = url;
          a.download = `${rec.id}.mp4`;
          a.click();
        } catch (err) {
          hint.textContent = `Download failed: ${err.message}`;
        } finally {
          download.disabled = false;
        }
      };
      const play = document.createElement('button');
      play.type = 'button';
      play.className = 'play';
      play.textContent = 'Play';
      play.disabled = rec.segments === 0;
      play.onclick = async () => {
        try {
          const { hls_url: url } = await links();
          window.recordings.playing = rec.id;
          await onPlay(url, rec);
        } catch (err) {
          hint.textContent = `Playback failed: ${err.message}`;
        }
      };
      li.append(text, ' ', download, ' ', play);
      return li;
    }),
  );
  return recs;
}

window.recordings = { lastDownload: null, playing: null };
