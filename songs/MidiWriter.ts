/**
 * A take's Standard MIDI File (format 1): a conductor track with the tempo, 4/4 time signature and
 * key signature, then one track per part (bass, chords, pad, lead, arp: the notes the synth
 * rendered, same onsets, pitches and lengths) and a GM drum track (channel 10) with every hit.
 * Sample positions become ticks at 960 per quarter note, rounded to the nearest tick (≤ 0.3 ms at
 * 100 bpm). Deterministic: the same score gives the same bytes.
 *
 * Notes of one key never overlap on a channel: a note still sounding when the same key sounds
 * again ends on that tick (its note-off sorts before the new note-on), and two onsets of one key on
 * the same tick are written as one note (the louder, the longer). Importers pair a note-off with
 * the newest or the oldest open note-on of its key, so overlaps would become 2–3 tick notes and
 * stray note-offs.
 */
import type { Part, Score } from './Composer.ts';
import type { DrumKind } from './Drums.ts';
import type { InstrumentId } from './Genres.ts';
import type { SongPlan } from './SongPlanner.ts';

/** Ticks per quarter note (the common DAW resolution). */
export const PPQ = 960;

/** General MIDI programs (0-based) nearest to each of our patches, so a DAW's GM player sounds close. */
const GM_PROGRAM: Record<InstrumentId, number> = {
  subBass: 38, bass808: 38, synthBass: 38, acidBass: 39, fingerBass: 33, reeseBass: 39,
  warmPad: 89, strings: 48, epiano: 4, piano: 0, organ: 16, pluck: 45, stab: 62, guitar: 27,
  distGuitar: 30, supersaw: 81, squareLead: 80, sawLead: 81, sax: 66, flute: 73, bell: 14, mallet: 12, brass: 61,
};

/** GM percussion keys (channel 10). */
export const GM_DRUM: Record<DrumKind, number> = {
  kick: 36, snare: 38, clap: 39, hat: 42, openhat: 46, ride: 51, crash: 49, rim: 37, tom: 45, lowtom: 41, shaker: 70,
};

/** Key signature sharps (+) or flats (−) per key name; other spellings fall back to the circle of fifths. */
const MAJOR_SF: Record<string, number> = { C: 0, G: 1, D: 2, A: 3, E: 4, B: 5, 'F#': 6, 'C#': 7, F: -1, Bb: -2, Eb: -3, Ab: -4, Db: -5, Gb: -6, Cb: -7 };
const MINOR_SF: Record<string, number> = { A: 0, E: 1, B: 2, 'F#': 3, 'C#': 4, 'G#': 5, 'D#': 6, 'A#': 7, D: -1, G: -2, C: -3, F: -4, Bb: -5, Eb: -6, Ab: -7 };

export function keySignature(plan: Pick<SongPlan, 'key' | 'tonic' | 'mode'>): { sf: number; minor: boolean } {
  const minor = plan.mode === 'minor';
  const tonicName = plan.key.split(' ')[0] ?? '';
  const known = (minor ? MINOR_SF : MAJOR_SF)[tonicName];
  if (known !== undefined) return { sf: known, minor };
  // Pitch class of the relative major, then fifths from C, folded into −5…6.
  const pc = (((plan.tonic + (minor ? 3 : 0)) % 12) + 12) % 12;
  let sf = (pc * 7) % 12;
  if (sf > 6) sf -= 12;
  return { sf, minor };
}

function vlq(v: number): number[] {
  const out = [v & 0x7f];
  let x = v >>> 7;
  while (x > 0) {
    out.unshift((x & 0x7f) | 0x80);
    x >>>= 7;
  }
  return out;
}

interface Ev {
  tick: number;
  /** Sort order at equal ticks: meta 0, note-off 1, program 2, note-on 3. */
  order: number;
  bytes: number[];
}

function track(events: Ev[]): Buffer {
  events.sort((a, b) => a.tick - b.tick || a.order - b.order);
  const body: number[] = [];
  let last = 0;
  for (const e of events) {
    body.push(...vlq(e.tick - last), ...e.bytes);
    last = e.tick;
  }
  body.push(0, 0xff, 0x2f, 0);
  const head = Buffer.alloc(8);
  head.write('MTrk', 0, 'ascii');
  head.writeUInt32BE(body.length, 4);
  return Buffer.concat([head, Buffer.from(body)]);
}

function text(type: number, s: string): number[] {
  const b = [...Buffer.from(s.replace(/[^\x20-\x7e]/g, '?').slice(0, 120), 'ascii')];
  return [0xff, type, ...vlq(b.length), ...b];
}

/** One note on a channel, in ticks: sounds from `on` until `off` (> on). */
interface TickNote {
  on: number;
  off: number;
  key: number;
  vel: number;
}

/** Note-on and note-off events of one channel, each note ended before its key sounds again. */
function noteEvents(ch: number, notes: TickNote[]): Ev[] {
  const byKey = new Map<number, TickNote[]>();
  for (const n of notes) {
    const list = byKey.get(n.key);
    if (list) list.push({ ...n });
    else byKey.set(n.key, [{ ...n }]);
  }
  const evs: Ev[] = [];
  for (const [key, list] of byKey) {
    list.sort((a, b) => a.on - b.on || b.off - a.off || b.vel - a.vel);
    const kept: TickNote[] = [];
    for (const n of list) {
      const prev = kept[kept.length - 1];
      if (prev && prev.on === n.on) {
        prev.off = Math.max(prev.off, n.off);
        prev.vel = Math.max(prev.vel, n.vel);
        continue;
      }
      if (prev && prev.off > n.on) prev.off = n.on;
      kept.push(n);
    }
    for (const n of kept) evs.push({ tick: n.on, order: 3, bytes: [0x90 | ch, key, n.vel] }, { tick: n.off, order: 1, bytes: [0x80 | ch, key, 0] });
  }
  return evs;
}

const TRACK_NAME: Record<Part['role'], string> = { bass: 'Bass', chords: 'Chords', pad: 'Pad', lead: 'Lead', arp: 'Arp' };

/** Notes of a part as written to MIDI: start < the take's length (loops wrap later ones onto the start). */
function renderedStart(start: number, plan: SongPlan): number | null {
  if (start < plan.totalSamples) return start;
  return plan.loop ? start % plan.totalSamples : null;
}

export function writeMidi(plan: SongPlan, score: Score): Buffer {
  const spb = score.samplesPerBeat;
  const tick = (sample: number) => Math.round((sample / spb) * PPQ);
  const tracks: Buffer[] = [];
  const usPerBeat = Math.round(60_000_000 / plan.bpm);
  const { sf, minor } = keySignature(plan);
  tracks.push(
    track([
      { tick: 0, order: 0, bytes: text(0x03, `Reverie ${plan.style} ${plan.key} ${plan.bpm} bpm seed ${plan.seed}`) },
      { tick: 0, order: 0, bytes: [0xff, 0x58, 4, 4, 2, 24, 8] },
      { tick: 0, order: 0, bytes: [0xff, 0x59, 2, sf & 0xff, minor ? 1 : 0] },
      { tick: 0, order: 0, bytes: [0xff, 0x51, 3, (usPerBeat >> 16) & 0xff, (usPerBeat >> 8) & 0xff, usPerBeat & 0xff] },
    ]),
  );
  let channel = 0;
  for (const part of score.parts) {
    if (part.notes.length === 0) continue;
    const ch = channel++;
    if (channel === 9) channel++; // channel 10 is GM percussion
    const evs: Ev[] = [
      { tick: 0, order: 0, bytes: text(0x03, `${TRACK_NAME[part.role]} (${part.instrument})`) },
      { tick: 0, order: 2, bytes: [0xc0 | ch, GM_PROGRAM[part.instrument]] },
    ];
    const notes: TickNote[] = [];
    for (const note of part.notes) {
      const start = renderedStart(note.start, plan);
      if (start === null) continue;
      const on = tick(start);
      const off = Math.max(on + 1, tick(start + note.length));
      const key = Math.max(0, Math.min(127, Math.round(note.pitch)));
      notes.push({ on, off, key, vel: Math.max(1, Math.min(127, Math.round(note.vel * 127))) });
    }
    tracks.push(track([...evs, ...noteEvents(ch, notes)]));
  }
  if (score.drums.length > 0) {
    // Drum hits have no gate: a 16th-note length, the usual for one-shot percussion (shorter when
    // the same drum hits again sooner: rolls and 808 hat runs).
    const len = PPQ / 4;
    const hits: TickNote[] = [];
    for (const h of score.drums) {
      const start = renderedStart(h.start, plan);
      if (start === null) continue;
      const on = tick(start);
      hits.push({ on, off: on + len, key: GM_DRUM[h.kind], vel: Math.max(1, Math.min(127, Math.round(h.vel * 127))) });
    }
    tracks.push(track([{ tick: 0, order: 0, bytes: text(0x03, 'Drums') }, ...noteEvents(9, hits)]));
  }
  const head = Buffer.alloc(14);
  head.write('MThd', 0, 'ascii');
  head.writeUInt32BE(6, 4);
  head.writeUInt16BE(1, 8); // format 1: simultaneous tracks
  head.writeUInt16BE(tracks.length, 10);
  head.writeUInt16BE(PPQ, 12);
  return Buffer.concat([head, ...tracks]);
}
