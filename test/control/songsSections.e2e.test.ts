/**
 * A two-take song with a section plan and stems, end to end (API → render worker → downloads):
 * each take renders the asked bars per section, checked from the audio (which stems sound in
 * which bars), not from our own plan; stems, the stems zip and MIDI download through the same
 * signed-link scheme as MP3 and WAV; the stems add up to the take's WAV.
 */
import t from 'tap';
import { monoOf, pcmOf } from '../helpers/audio.ts';
import { makeApp } from '../helpers/app.ts';
import { songServices, startRenderWorker } from '../helpers/songs.ts';

const BPM = 120;
const BAR = (240 / BPM) * 48_000; // samples per bar
const SECTIONS = [
  { name: 'intro', bars: 2, energy: 0.2, style: 'no drums, no bass' },
  { name: 'verse', bars: 4, energy: 0.5, style: 'sparse' },
  { name: 'chorus', bars: 4, energy: 0.9, style: 'full' },
  { name: 'outro', bars: 2, energy: 0.3 },
];

/** RMS of each bar of a mono signal, over its last three quarters (earlier notes' releases have faded by then). */
function barRms(x: Float64Array, bars: number): number[] {
  return Array.from({ length: bars }, (_, b) => {
    const lo = Math.round(b * BAR + BAR / 4);
    const hi = Math.round((b + 1) * BAR);
    let s = 0;
    for (let i = lo; i < hi; i++) s += (x[i] as number) ** 2;
    return Math.sqrt(s / (hi - lo));
  });
}

t.test('sections render the asked bars per section in both takes; stems and MIDI download', { timeout: 300_000 }, async (t) => {
  const { app, key, store, ctx } = await makeApp(t, { services: (base) => songServices(base) });
  startRenderWorker(t, { store, blobs: ctx.blobs! });

  const auth = { authorization: `Bearer ${await key('pro')}` };
  const created = await app.inject({
    method: 'POST',
    url: '/music/v1/songs',
    headers: auth,
    payload: { prompt: 'synthwave with a square lead', bpm: BPM, seed: 21, variations: 2, stems: true, sections: SECTIONS },
  });
  t.equal(created.statusCode, 202);
  const id = created.json().id as string;
  let song = created.json();
  const deadline = Date.now() + 250_000;
  while (song.status !== 'done' && song.status !== 'failed' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    song = (await app.inject({ method: 'GET', url: `/music/v1/songs/${id}`, headers: auth })).json();
  }
  t.equal(song.status, 'done');
  t.same(song.sections.map((s: { name: string; bars: number }) => [s.name, s.bars]), SECTIONS.map((s) => [s.name, s.bars]), 'the plan used is the one asked');

  /** Follows a stable URL's 302 to the signed link and returns the body. */
  const download = async (url: string) => {
    const redirect = await app.inject({ method: 'GET', url: new URL(url).pathname });
    t.equal(redirect.statusCode, 302, `${new URL(url).pathname} redirects`);
    const signed = new URL(redirect.headers.location as string);
    const res = await app.inject({ method: 'GET', url: signed.pathname + signed.search });
    t.equal(res.statusCode, 200);
    return res;
  };

  for (const take of song.takes) {
    t.equal(take.duration, 24, '12 bars at 120 bpm');
    const wav = (await download(take.wav_url)).rawPayload;
    const stems: Record<string, Buffer> = {};
    for (const [name, url] of Object.entries(take.stems as Record<string, string>)) {
      const res = await download(url);
      t.equal(res.headers['content-type'], 'audio/wav');
      stems[name] = res.rawPayload;
    }
    const zip = await download(take.stems_zip_url);
    t.equal(zip.headers['content-type'], 'application/zip');
    t.equal(zip.rawPayload.readUInt32LE(0), 0x04034b50, 'a zip');
    const midi = await download(take.midi_url);
    t.equal(midi.rawPayload.subarray(0, 4).toString('ascii'), 'MThd', 'a Standard MIDI File');

    // Σ stems = mix (the downloaded files, sample by sample).
    const mix = pcmOf(wav);
    const parts = Object.values(stems).map(pcmOf);
    let worst = 0;
    for (let i = 0; i < mix.length; i++) worst = Math.max(worst, Math.abs(parts.reduce((s, p) => s + (p[i] as number), 0) - (mix[i] as number)));
    t.ok(worst <= 1, `take ${take.n}: stems add up to the WAV (worst ${worst} LSB)`);

    // Structure from the audio: which stems sound in which bars.
    const bars = 12;
    const rms = Object.fromEntries(['drums', 'bass', 'lead', 'chords'].map((s) => [s, barRms(monoOf(pcmOf(stems[s] as Buffer)), bars)]));
    const on = (s: string, b: number) => (rms[s]![b] as number) > 0.1 * Math.max(...rms[s]!);
    const layout = (s: string) => Array.from({ length: bars }, (_, b) => (on(s, b) ? 'x' : '.')).join('');
    // intro 2 (no drums, no bass) | verse 4 (sparse: no lead) | chorus 4 (full) | outro 2 (no lead; the last bar fades)
    t.equal(layout('drums').slice(0, 11), '..xxxxxxxxx', `take ${take.n}: drums from bar 3 (intro has none)`);
    t.equal(layout('bass').slice(0, 11), '..xxxxxxxxx', `take ${take.n}: bass from bar 3`);
    t.equal(layout('lead').slice(0, 11), '......xxxx.', `take ${take.n}: lead only in the 4 chorus bars`);
    t.equal(layout('chords').slice(0, 11), 'xxxxxxxxxxx', `take ${take.n}: chords throughout`);
  }
});
