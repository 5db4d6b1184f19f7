/**
 * The take's MIDI file, read by a real parser (mido, Debian's python3-mido): format 1 at 960
 * PPQ with the tempo, key and time signature; one track per part with exactly the notes the
 * engine rendered (onset, pitch, length in ticks); and its notes line up with onsets detected in
 * the rendered stems' audio (drums; lead and arp). Notes of one key never overlap on a channel,
 * so importers that pair a note-off with the newest (or oldest) note-on read whole notes.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { compose } from '../../songs/Composer.ts';
import { PPQ, writeMidi } from '../../songs/MidiWriter.ts';
import { renderTakeHere, type TakeResult } from '../../songs/Renderer.ts';
import { planSong } from '../../songs/SongPlanner.ts';
import { detectOnsets, matchRate, monoOf, pcmOf } from '../helpers/audio.ts';

/** Debian's interpreter, where python3-mido lives (a pyenv python on PATH would not have it). */
const PYTHON = '/usr/bin/python3';
const dir = mkdtempSync(join(tmpdir(), 'songs-midi-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

interface Parsed {
  type: number;
  tpb: number;
  tempo: number | null;
  key: string | null;
  time: [number, number] | null;
  tracks: { name: string; notes: [number, number, number, number][] }[];
}

/** Parses with mido; notes as [onset tick, pitch, velocity, length in ticks] (note_on → matching note_off). */
function parse(midi: Buffer): Parsed {
  const file = join(dir, `t-${Math.random().toString(36).slice(2)}.mid`);
  writeFileSync(file, midi);
  const script = `
import json, sys, mido
m = mido.MidiFile(sys.argv[1])
out = {'type': m.type, 'tpb': m.ticks_per_beat, 'tempo': None, 'key': None, 'time': None, 'tracks': []}
for tr in m.tracks:
    t = 0; open_ = {}; notes = []
    for msg in tr:
        t += msg.time
        if msg.type == 'set_tempo': out['tempo'] = msg.tempo
        elif msg.type == 'key_signature': out['key'] = msg.key
        elif msg.type == 'time_signature': out['time'] = [msg.numerator, msg.denominator]
        elif msg.type == 'note_on' and msg.velocity > 0: open_.setdefault(msg.note, []).append((t, msg.velocity))
        elif msg.type == 'note_off' or (msg.type == 'note_on' and msg.velocity == 0):
            start, vel = open_[msg.note].pop(0)
            notes.append([start, msg.note, vel, t - start])
    notes.sort()
    out['tracks'].append({'name': tr.name, 'notes': notes})
print(json.dumps(out))
`;
  return JSON.parse(execFileSync(PYTHON, ['-c', script, file], { encoding: 'utf8' })) as Parsed;
}

const plan = planSong({ prompt: 'deep house with warm pads and a pluck hook', seed: 11, duration: 12, key: 'D minor' });
let take: TakeResult;
let parsed: Parsed;

t.before(async () => {
  take = await renderTakeHere(plan, 1, undefined, { stems: true });
  parsed = parse(take.midi);
});

t.test('format 1 at 960 PPQ with tempo, 4/4 and the key signature', async (t) => {
  t.equal(parsed.type, 1);
  t.equal(parsed.tpb, PPQ);
  t.equal(parsed.tempo, Math.round(60_000_000 / plan.bpm), `tempo of ${plan.bpm} bpm`);
  t.same(parsed.time, [4, 4]);
  t.equal(parsed.key, 'Dm', 'D minor');
  const sharp = parse(renderMidiOnly(planSong({ prompt: 'pop', seed: 1, duration: 10, key: 'F# major' })));
  t.equal(sharp.key, 'F#');
  const flat = parse(renderMidiOnly(planSong({ prompt: 'pop', seed: 1, duration: 10, key: 'Eb minor' })));
  t.equal(flat.key, 'Ebm');
});

/** MIDI without audio: the writer on the composed score (what renderTakeHere writes for take 1). */
function renderMidiOnly(p: ReturnType<typeof planSong>): Buffer {
  return writeMidi(p, compose(p, 1));
}

t.test('one track per part holding exactly the rendered notes (onset, pitch, length)', async (t) => {
  const score = compose(plan, 1);
  const spb = score.samplesPerBeat;
  const tick = (s: number) => Math.round((s / spb) * PPQ);
  const partTracks = parsed.tracks.slice(1).filter((tr) => tr.name !== 'Drums');
  const parts = score.parts.filter((p) => p.notes.length > 0);
  t.equal(partTracks.length, parts.length, 'a track per sounding part');
  for (const [i, part] of parts.entries()) {
    const tr = partTracks[i]!;
    t.match(tr.name.toLowerCase(), part.role, `track ${i + 1} is the ${part.role}`);
    const expected = part.notes
      .filter((n) => n.start < plan.totalSamples)
      .map((n) => [tick(n.start), Math.round(n.pitch), Math.max(1, tick(n.start + n.length) - tick(n.start))])
      .sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]! || a[2]! - b[2]!);
    const got = tr.notes.map(([s, p, , len]) => [s, p, len]).sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]! || a[2]! - b[2]!);
    t.same(got, expected, `${part.role}: ${expected.length} notes, same onsets, pitches and lengths`);
  }
  const drums = parsed.tracks.find((tr) => tr.name === 'Drums');
  t.equal(drums?.notes.length, score.drums.filter((h) => h.start < plan.totalSamples).length, 'every drum hit');
});

t.test('MIDI onsets match onsets detected in the rendered stems', { timeout: 60_000 }, async (t) => {
  const secPerTick = 60 / plan.bpm / parsed.tpb;
  const zip = take.stems!.zip!;
  const stem = (name: 'drums' | 'lead') => {
    const m = take.stems!.members[name];
    return monoOf(pcmOf(zip.subarray(m.offset, m.offset + m.size)));
  };
  const times = (names: RegExp) => parsed.tracks.filter((tr) => names.test(tr.name)).flatMap((tr) => tr.notes.map((n) => n[0] * secPerTick));
  for (const [name, tracks, minRecall] of [['drums', /^Drums$/, 0.75], ['lead', /^(Lead|Arp)/, 0.9]] as const) {
    const detected = detectOnsets(stem(name), { thresholdDb: 10 });
    const midi = times(tracks);
    t.ok(detected.length > 10, `${name}: ${detected.length} onsets detected`);
    const precision = matchRate(detected, midi, 0.02);
    const recall = matchRate(midi, detected, 0.02);
    t.ok(precision >= 0.95, `${name}: ${(precision * 100).toFixed(1)} % of detected onsets are MIDI notes (±20 ms)`);
    t.ok(recall >= minRecall, `${name}: ${(recall * 100).toFixed(1)} % of MIDI notes have a detected onset (±20 ms)`);
  }
});

/** Per (channel, key) as mido reads it: note-ons while the key still sounds, and note-offs of a silent key. */
function overlaps(midi: Buffer): { notes: number; overlapping: number; stray: number; first: string | null } {
  const file = join(dir, `o-${Math.random().toString(36).slice(2)}.mid`);
  writeFileSync(file, midi);
  const script = `
import json, sys, mido
m = mido.MidiFile(sys.argv[1])
out = {'notes': 0, 'overlapping': 0, 'stray': 0, 'first': None}
for tr in m.tracks:
    t = 0; sounding = {}
    for msg in tr:
        t += msg.time
        if msg.type == 'note_on' and msg.velocity > 0:
            k = (msg.channel, msg.note); out['notes'] += 1
            if k in sounding:
                out['overlapping'] += 1
                out['first'] = out['first'] or '%s: key %d restarts at tick %d, sounding since %d' % (tr.name, msg.note, t, sounding[k])
            sounding[k] = t
        elif msg.type == 'note_off' or (msg.type == 'note_on' and msg.velocity == 0):
            k = (msg.channel, msg.note)
            if k in sounding: del sounding[k]
            else: out['stray'] += 1
print(json.dumps(out))
`;
  return JSON.parse(execFileSync(PYTHON, ['-c', script, file], { encoding: 'utf8' })) as ReturnType<typeof overlaps>;
}

t.test('no note starts while the same key still sounds on its channel, read by mido', { timeout: 120_000 }, async (t) => {
  const songs: Parameters<typeof planSong>[0][] = [
    // A user's song whose drum track held 107 such overlaps (key 38 again at tick 18718, the previous hit ending at 18720).
    { prompt: 'trap beat with 808 and bells', duration: 30, seed: 5 },
    { prompt: 'drum and bass with rolling hats', duration: 20, seed: 2 },
    { prompt: 'lo-fi hip hop with rhodes', duration: 20, seed: 9 },
    { prompt: 'techno loop with an acid bass', loop: true, bpm: 130, seed: 3 },
    { prompt: 'synth pop with a pluck arp and strings', duration: 20, seed: 4 },
  ];
  for (const req of songs) {
    const p = planSong(req);
    for (const n of [1, 2]) {
      const midi = writeMidi(p, compose(p, n));
      const got = overlaps(midi);
      const what = `${req.prompt} seed ${req.seed} take ${n}`;
      t.ok(got.notes > 50, `${what}: ${got.notes} notes`);
      t.equal(got.overlapping, 0, `${what}: no note-on of a sounding key${got.first ? ` (${got.first})` : ''}`);
      t.equal(got.stray, 0, `${what}: every note-off ends a sounding note`);
      t.ok(writeMidi(p, compose(p, n)).equals(midi), `${what}: the same seed gives the same bytes`);
    }
  }
});
