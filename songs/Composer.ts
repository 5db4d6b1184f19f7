/**
 * Turns a SongPlan and a take seed into a Score: note events per part (bass, chords, pad, lead,
 * arpeggio) and drum hits, with sample positions computed from the song origin (never accumulated,
 * so non-integer bar lengths do not drift). Take n uses seed + n − 1: same sections, key, tempo and
 * progressions; different voicings, bass and comping rhythms, melody, fills and drum variants.
 */
import type { Section } from './Arranger.ts';
import { drumBar, variantCount, type DrumKind } from './Drums.ts';
import type { DrumFeel, InstrumentId } from './Genres.ts';
import { parseRoman, scaleOf, voiceChord, type Chord } from './Harmony.ts';
import { Random } from './Random.ts';
import type { SongPlan } from './SongPlanner.ts';

export type PartRole = 'bass' | 'chords' | 'pad' | 'lead' | 'arp';

export interface Note {
  /** Start and gate length in samples. */
  start: number;
  length: number;
  /** MIDI note number. */
  pitch: number;
  /** 0–1. */
  vel: number;
  /** 0–1 filter brightness (section energy; builds rise). */
  bright: number;
  /** Pitch glide target (MIDI) over the note, or -1 (808 slides). */
  slideTo: number;
}

export interface Part {
  role: PartRole;
  instrument: InstrumentId;
  notes: Note[];
  /** -1 left … 1 right. */
  pan: number;
  /** Linear gain before the master. */
  gain: number;
  /** Send levels 0–1. */
  reverb: number;
  delay: number;
  /** Ducked by the kick (side-chain pumping) in four-floor styles. */
  duck: boolean;
}

export interface DrumHit {
  start: number;
  kind: DrumKind;
  vel: number;
}

export interface Score {
  parts: Part[];
  drums: DrumHit[];
  /** Kick start samples, for side-chain ducking. */
  kicks: number[];
  totalSamples: number;
  samplesPerBeat: number;
}

const PUMPING: ReadonlySet<DrumFeel> = new Set(['fourfloor', 'techno', 'breakbeat', 'halftime']);

/** Instruments whose held chords are tied across bars. */
const HELD: ReadonlySet<InstrumentId> = new Set(['warmPad', 'strings', 'supersaw', 'organ']);

/**
 * Merges notes of the same pitch that start where the previous one ends (within 1 ms), except at a
 * section start (sample positions in `edges`): held chords are struck again there, which keeps
 * each section's notes its own (a changed section never lengthens or shortens its neighbours').
 */
function tieNotes(notes: Note[], edges: ReadonlySet<number>): Note[] {
  const sorted = [...notes].sort((a, b) => a.pitch - b.pitch || a.start - b.start);
  const out: Note[] = [];
  for (const n of sorted) {
    const prev = out[out.length - 1];
    if (prev && prev.pitch === n.pitch && Math.abs(prev.start + prev.length - n.start) <= 48 && prev.slideTo < 0 && n.slideTo < 0 && !edges.has(n.start)) {
      prev.length = n.start + n.length - prev.start;
      prev.vel = Math.max(prev.vel, n.vel);
    } else out.push({ ...n });
  }
  return out.sort((a, b) => a.start - b.start || a.pitch - b.pitch);
}

export function takeSeed(plan: SongPlan, n: number): number {
  return (plan.seed + n - 1) >>> 0;
}

export function compose(plan: SongPlan, n: number): Score {
  const rng = new Random(takeSeed(plan, n));
  const spb = (60 / plan.bpm) * plan.sampleRate;
  const swing = plan.swing;
  /** Sample position of a beat (16th-note swing applied to odd 16ths). */
  const at = (beat: number): number => {
    const sixteenth = beat * 4;
    const idx = Math.floor(sixteenth + 1e-6);
    const frac = sixteenth - idx;
    const sw = idx % 2 === 1 && frac < 1e-6 ? swing * 0.25 : 0;
    return Math.round((beat + sw) * spb);
  };
  const tonicMidi = plan.tonic;
  const scale = scaleOf(plan.mode);
  const lastBar = plan.bars - 1;

  // Random choices made inside a section draw from that section's own stream (forked by part and
  // section index), so re-rendering with one section changed leaves the other sections' notes as
  // they were. Song-wide choices (register, arp pattern, acid line) stay on the part's stream.
  const sectionIndex = new Map<Section, number>(plan.sections.map((sec, i) => [sec, i]));
  const streams = new Map<string, Random>();
  const sectionRng = (part: Random, label: string, sec: Section): Random => {
    const k = `${label}:${sectionIndex.get(sec) ?? 0}`;
    let r = streams.get(k);
    if (!r) {
      r = part.fork(k);
      streams.set(k, r);
    }
    return r;
  };

  const chordAt: Chord[] = [];
  const sectionOf: Section[] = [];
  for (const s of plan.sections) {
    for (let b = 0; b < s.bars; b++) {
      chordAt.push(parseRoman(s.progression[b % s.progression.length] as string));
      sectionOf.push(s);
    }
  }
  // Final bar of a song resolves to the tonic.
  if (!plan.loop && plan.bars > 2) chordAt[lastBar] = parseRoman(plan.mode === 'minor' ? 'i' : 'I');

  const parts: Part[] = [];
  const mk = (role: PartRole, instrument: InstrumentId, o: Partial<Part>): Part => {
    const p: Part = { role, instrument, notes: [], pan: 0, gain: 1, reverb: 0.15, delay: 0, duck: false, ...o };
    parts.push(p);
    return p;
  };
  const pump = PUMPING.has(plan.drums);
  const ins = plan.instruments;
  const bass = mk('bass', ins.bass, { gain: 0.9, reverb: 0.02, duck: pump && plan.drums !== 'breakbeat' });
  const chords = mk('chords', ins.chords, { gain: 0.55, reverb: 0.28, delay: ins.chords === 'stab' || ins.chords === 'pluck' ? 0.18 : 0.05, duck: pump });
  const pad = ins.pad ? mk('pad', ins.pad, { gain: 0.32, reverb: 0.45, duck: pump }) : null;
  const lead = mk('lead', ins.lead, { gain: 0.5, reverb: 0.3, delay: 0.22, pan: 0.12 });
  const arp = ins.arp ? mk('arp', 'pluck', { gain: 0.28, reverb: 0.3, delay: 0.3, pan: -0.25, duck: pump }) : null;

  const push = (part: Part, beat: number, lenBeats: number, pitch: number, vel: number, bright: number, slideTo = -1) => {
    const start = at(beat);
    const end = at(beat + lenBeats);
    if (start >= plan.totalSamples && !plan.loop) return;
    part.notes.push({ start, length: Math.max(64, end - start), pitch, vel, bright, slideTo });
  };

  // ---- chords, pad, arp ----
  const crng = rng.fork('chords');
  const chordRegister = 52 + crng.int(5);
  const chordSize = ins.chords === 'distGuitar' ? 3 : crng.chance(0.5) ? 4 : 3;
  let prevVoicing: number[] | null = null;
  const compRhythms: Record<string, number[][]> = {
    comp: [[0, 6, 10], [0, 3, 8, 14], [2, 6, 12], [0, 7, 10, 14], [0, 8]],
    stab: [[2, 6, 10, 14], [3, 6, 11, 14], [0, 3, 6, 10, 12], [2, 5, 10, 13]],
    skank: [[4, 12], [2, 6, 10, 14]],
    funk: [[0, 3, 6, 8, 11, 14], [2, 4, 7, 10, 12, 15], [0, 2, 6, 10, 12]],
    eighths: [[0, 2, 4, 6, 8, 10, 12, 14]],
    quarters: [[0, 4, 8, 12], [0, 4, 8, 10, 12]],
  };
  const chordStyle = (r: Random): keyof typeof compRhythms | 'hold' => {
    switch (ins.chords) {
      case 'stab':
        return 'stab';
      case 'epiano':
        return plan.style === 'jazz' ? 'comp' : r.chance(0.5) ? 'comp' : 'hold';
      case 'piano':
        return plan.style === 'jazz' ? 'comp' : r.chance(0.5) ? 'quarters' : 'comp';
      case 'organ':
        return plan.style === 'reggae' ? 'skank' : 'hold';
      case 'guitar':
        return plan.style === 'reggae' ? 'skank' : plan.style === 'funk' ? 'funk' : 'quarters';
      case 'distGuitar':
        return 'eighths';
      case 'pluck':
      case 'bell':
      case 'mallet':
        return 'comp';
      default:
        return 'hold';
    }
  };
  const sectionRhythm = new Map<Section, number[]>();
  const sectionStyle = new Map<Section, keyof typeof compRhythms | 'hold'>();
  for (const s of plan.sections) {
    const r = sectionRng(crng, 'style', s);
    const st = chordStyle(r);
    sectionStyle.set(s, st);
    if (st !== 'hold') sectionRhythm.set(s, r.pick(compRhythms[st] as number[][]));
  }
  const arpPattern = crng.pick(['up', 'down', 'updown', 'random'] as const);
  const arpRate = plan.bpm > 150 ? 2 : 4; // notes per beat

  for (let bar = 0; bar < plan.bars; bar++) {
    const s = sectionOf[bar] as Section;
    const chord = chordAt[bar] as Chord;
    const barInSection = bar - s.startBar;
    const buildProgress = s.kind === 'build' ? (barInSection + 1) / s.bars : 0;
    const bright = Math.min(1, s.energy * 0.8 + 0.15 + buildProgress * 0.4);
    const voicing = voiceChord(chord, tonicMidi, prevVoicing, chordRegister, chordRegister + 22, chordSize);
    prevVoicing = voicing;
    const isFinal = !plan.loop && bar === lastBar && plan.bars > 2;
    const b0 = bar * 4;
    const vel = 0.55 + 0.35 * s.energy;
    const cr = sectionRng(crng, 'notes', s);
    if (s.layers.chords) {
      const style = sectionStyle.get(s) ?? 'hold';
      if (style === 'hold' || isFinal) {
        for (const p of voicing) push(chords, b0, isFinal ? 3.5 : 4, p, vel * 0.8, bright);
      } else {
        const rhythm = sectionRhythm.get(s) as number[];
        const power = ins.chords === 'distGuitar';
        const notes = power ? [voicing[0] as number, (voicing[0] as number) + 7, (voicing[0] as number) + 12] : voicing;
        for (let k = 0; k < rhythm.length; k++) {
          const st = rhythm[k] as number;
          const next = k + 1 < rhythm.length ? (rhythm[k + 1] as number) : 16;
          const len = style === 'stab' || style === 'skank' ? 0.4 : Math.max(0.45, ((next - st) / 4) * 0.9);
          const accent = st % 4 === 0 ? 1 : 0.85;
          for (const p of notes) push(chords, b0 + st / 4, len, p, vel * accent * (0.9 + 0.1 * cr.next()), bright);
        }
      }
    }
    if (pad && s.layers.pad) {
      // Over held pad-like chords the pad adds only two notes an octave up (root and the top voice).
      const padNotes = HELD.has(ins.chords) ? [(voicing[0] as number) + 12, (voicing[voicing.length - 1] as number) + 12] : [voicing[0] as number, ...voicing.slice(1).map((p) => p + 12)].slice(0, 3);
      for (const p of padNotes) push(pad, b0, isFinal ? 3.5 : 4, p, 0.6 + 0.2 * s.energy, bright * 0.8);
    }
    if (arp && s.layers.arp && !isFinal) {
      const tones = [...voicing, ...voicing.map((p) => p + 12)].sort((a, b) => a - b);
      const steps = 4 * arpRate;
      for (let k = 0; k < steps; k++) {
        let idx: number;
        if (arpPattern === 'up') idx = k % tones.length;
        else if (arpPattern === 'down') idx = tones.length - 1 - (k % tones.length);
        else if (arpPattern === 'updown') {
          const cyc = tones.length * 2 - 2;
          const m = k % cyc;
          idx = m < tones.length ? m : cyc - m;
        } else idx = cr.int(tones.length);
        push(arp, b0 + k / arpRate, (1 / arpRate) * 0.7, (tones[idx] as number) + 12, 0.5 + 0.3 * (k % 4 === 0 ? 1 : 0.4), bright);
      }
    }
  }

  // ---- bass ----
  const brng = rng.fork('bass');
  // Roots between E1 (28) and D#2 (39).
  const rootMidi = (chord: Chord): number => 28 + ((((tonicMidi + chord.root - 4) % 12) + 12) % 12);
  const bassPatterns: Record<string, number[][]> = {
    offbeat: [[2, 6, 10, 14]],
    rolling: [[1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15]],
    boombap: [[0, 7, 10], [0, 3, 10], [0, 10, 13]],
    pop: [[0, 6, 8, 14], [0, 8, 11], [0, 3, 8, 12]],
    eighths: [[0, 2, 4, 6, 8, 10, 12, 14]],
    long: [[0]],
    dnb: [[0, 10], [0, 6, 10]],
    reggae: [[2, 6, 8, 11, 14], [3, 6, 8, 12]],
    funk: [[0, 3, 6, 8, 10, 11, 14], [0, 2, 7, 8, 10, 13]],
  };
  const bassStyle = ((): string => {
    switch (plan.drums) {
      case 'fourfloor':
        return plan.style === 'trance' ? 'rolling' : 'offbeat';
      case 'techno':
        return 'acid';
      case 'boombap':
        return 'boombap';
      case 'trap':
        return 'trap';
      case 'breakbeat':
        return 'dnb';
      case 'halftime':
        return 'long';
      case 'backbeat':
        return plan.style === 'rock' || plan.style === 'synthwave' ? 'eighths' : 'pop';
      case 'disco':
        return 'funk';
      case 'onedrop':
        return 'reggae';
      case 'jazz':
        return 'walking';
      default:
        return 'long';
    }
  })();
  const acidLine = Array.from({ length: 16 }, (_, k) => ({
    on: k % 4 === 0 || brng.chance(0.55),
    oct: brng.chance(0.2) ? 12 : 0,
    accent: brng.chance(0.3),
    slide: brng.chance(0.2),
  }));
  const sectionBass = new Map<Section, number[]>();
  for (const s of plan.sections) {
    const list = bassPatterns[bassStyle];
    if (list) sectionBass.set(s, sectionRng(brng, 'pattern', s).pick(list));
  }
  for (let bar = 0; bar < plan.bars; bar++) {
    const s = sectionOf[bar] as Section;
    if (!s.layers.bass) continue;
    const br = sectionRng(brng, 'notes', s);
    const chord = chordAt[bar] as Chord;
    const next = chordAt[(bar + 1) % plan.bars] as Chord;
    const root = rootMidi(chord);
    const b0 = bar * 4;
    const vel = 0.7 + 0.25 * s.energy;
    const bright = 0.3 + 0.6 * s.energy;
    const isFinal = !plan.loop && bar === lastBar && plan.bars > 2;
    if (isFinal) {
      push(bass, b0, 3, root, vel, bright);
      continue;
    }
    if (bassStyle === 'walking') {
      const fifth = root + 7;
      const third = root + (chord.minor ? 3 : 4);
      const target = rootMidi(next);
      const approach = target + (br.chance(0.5) ? -1 : 1);
      const line = [root, br.chance(0.5) ? third : fifth, br.chance(0.5) ? fifth : third + 12 - 12, approach];
      for (let k = 0; k < 4; k++) push(bass, b0 + k, 0.9, line[k] as number, vel * (k === 0 ? 1 : 0.85), bright);
    } else if (bassStyle === 'acid') {
      for (let k = 0; k < 16; k++) {
        const st = acidLine[k] as (typeof acidLine)[number];
        if (!st.on) continue;
        push(bass, b0 + k / 4, st.slide ? 0.3 : 0.18, root + st.oct, st.accent ? vel : vel * 0.7, Math.min(1, bright + (st.accent ? 0.3 : 0)));
      }
    } else if (bassStyle === 'trap') {
      // 808 follows the kick: long notes, sometimes sliding to the octave.
      const hits = [0, br.chance(0.5) ? 6 : 10];
      for (let k = 0; k < hits.length; k++) {
        const st = hits[k] as number;
        const end = k + 1 < hits.length ? (hits[k + 1] as number) : 16;
        const slide = br.chance(0.25) ? root + 12 : -1;
        push(bass, b0 + st / 4, (end - st) / 4, root, vel, bright, slide);
      }
    } else {
      const pat = sectionBass.get(s) ?? [0];
      for (let k = 0; k < pat.length; k++) {
        const st = pat[k] as number;
        const end = k + 1 < pat.length ? (pat[k + 1] as number) : 16;
        let pitch = root;
        if (bassStyle === 'funk' && k % 3 === 2) pitch = root + 12;
        if (bassStyle === 'reggae' && k === 2) pitch = root + 7;
        if (bassStyle === 'eighths' && plan.style === 'synthwave' && k % 2 === 1) pitch = root + 12;
        // Lead into the next chord on the last note of the bar.
        if (k === pat.length - 1 && pat.length > 2 && next !== chord && br.chance(0.4)) pitch = rootMidi(next) + (br.chance(0.5) ? -2 : 2);
        const len = bassStyle === 'long' || bassStyle === 'dnb' ? (end - st) / 4 : Math.min((end - st) / 4, 0.45 + 0.4 * br.next());
        push(bass, b0 + st / 4, len, pitch, vel * (st % 4 === 0 ? 1 : 0.85), bright);
      }
    }
  }

  // ---- lead melody: a motif per section kind, repeated with variation, snapped to chord tones ----
  const lrng = rng.fork('lead');
  const leadRange: Record<string, [number, number]> = {
    sax: [58, 79], brass: [58, 79], flute: [67, 88], bell: [72, 91], mallet: [67, 88], distGuitar: [59, 81],
  };
  const [lo, hi] = leadRange[ins.lead] ?? [64, 84];
  const motifs = new Map<string, { steps: number[]; lens: number[]; degrees: number[] }>();
  const motifFor = (s: Section) => {
    const key = s.kind === 'drop' || s.kind === 'chorus' ? 'A' : s.kind === 'break' || s.kind === 'bridge' ? 'B' : 'C';
    let m = motifs.get(key);
    if (!m) {
      // Each motif has its own stream: editing a section never changes another kind's motif.
      const lrngM = lrng.fork(`motif:${key}`);
      const density = 0.25 + 0.45 * s.energy;
      const steps: number[] = [];
      const lens: number[] = [];
      for (let st = 0; st < 32; st++) {
        const strong = st % 4 === 0;
        if (lrngM.chance(strong ? density + 0.25 : density * (st % 2 === 0 ? 0.8 : 0.45))) steps.push(st);
      }
      if (steps.length === 0 || steps[0] !== 0) steps.unshift(0);
      for (let k = 0; k < steps.length; k++) {
        const gap = (k + 1 < steps.length ? (steps[k + 1] as number) : 32) - (steps[k] as number);
        lens.push(Math.max(1, Math.min(gap, lrngM.pick([1, 2, 2, 3, 4]))));
      }
      // Scale degrees walk mostly by step.
      const degrees: number[] = [];
      let d = lrngM.pick([0, 2, 4]);
      for (let k = 0; k < steps.length; k++) {
        degrees.push(d);
        d += lrngM.weighted([-2, -1, 1, 2, 3, -3], [2, 5, 5, 2, 1, 1]);
        d = Math.max(-2, Math.min(9, d));
      }
      m = { steps, lens, degrees };
      motifs.set(key, m);
    }
    return m;
  };
  const degreeToMidi = (deg: number): number => {
    const oct = Math.floor(deg / 7);
    const pc = scale[((deg % 7) + 7) % 7] as number;
    let p = 12 * 5 + tonicMidi + pc + 12 * oct;
    while (p < lo) p += 12;
    while (p > hi) p -= 12;
    return p;
  };
  for (let bar = 0; bar < plan.bars; bar += 2) {
    const s = sectionOf[bar] as Section;
    if (!s.layers.lead) continue;
    const m = motifFor(s);
    const phrase = Math.floor((bar - s.startBar) / 2);
    const variation = phrase % 2 === 1 ? sectionRng(lrng, 'variation', s).int(3) - 1 : 0;
    for (let k = 0; k < m.steps.length; k++) {
      const st = m.steps[k] as number;
      const barIdx = bar + Math.floor(st / 16);
      if (barIdx >= plan.bars || sectionOf[barIdx] !== s) continue;
      if (!plan.loop && barIdx === lastBar && plan.bars > 2) continue;
      const chord = chordAt[barIdx] as Chord;
      let pitch = degreeToMidi((m.degrees[k] as number) + variation);
      // Strong beats land on a chord tone.
      if (st % 4 === 0) {
        const pcs = chord.intervals.map((i) => (tonicMidi + chord.root + i) % 12);
        let best = pitch;
        let bestD = 99;
        for (let dlt = -3; dlt <= 3; dlt++) {
          if (pcs.includes((((pitch + dlt) % 12) + 12) % 12) && Math.abs(dlt) < bestD) {
            bestD = Math.abs(dlt);
            best = pitch + dlt;
          }
        }
        pitch = best;
      }
      const len = ((m.lens[k] as number) / 4) * 0.92;
      push(lead, bar * 4 + st / 4, len, pitch, (0.65 + 0.3 * s.energy) * (st % 4 === 0 ? 1 : 0.85), 0.4 + 0.5 * s.energy);
    }
  }

  // ---- drums ----
  const drng = rng.fork('drums');
  const drums: DrumHit[] = [];
  const kicks: number[] = [];
  const sectionVariant = new Map<Section, number>();
  for (const s of plan.sections) sectionVariant.set(s, sectionRng(drng, 'variant', s).int(variantCount(plan.drums)));
  for (let bar = 0; bar < plan.bars; bar++) {
    const s = sectionOf[bar] as Section;
    const dr = sectionRng(drng, 'hits', s);
    const hits = drumBar({
      feel: plan.drums,
      level: s.layers.drums,
      variant: sectionVariant.get(s) ?? 0,
      barInSection: bar - s.startBar,
      sectionBars: s.bars,
      build: s.kind === 'build',
      final: !plan.loop && bar === lastBar && plan.bars > 2 && plan.drums !== 'none',
      rng: dr,
    });
    for (const h of hits) {
      // Humanise by up to ±1.5 ms except kicks (they drive the side-chain).
      const jitter = h.kind === 'kick' ? 0 : Math.round((dr.next() - 0.5) * 0.003 * plan.sampleRate);
      const start = Math.max(0, at(bar * 4 + h.step / 4) + jitter);
      drums.push({ start, kind: h.kind, vel: Math.min(1, h.vel * (0.75 + 0.3 * s.energy)) });
      if (h.kind === 'kick') kicks.push(start);
    }
  }
  // Held parts: a pitch that continues into the next bar is tied, not struck again (smoother, and
  // half the voices to render for pads).
  const edges = new Set(plan.sections.map((sec) => at(sec.startBar * 4)));
  for (const part of parts) {
    if (part.role !== 'pad' && !(part.role === 'chords' && HELD.has(part.instrument))) continue;
    part.notes = tieNotes(part.notes, edges);
  }
  drums.sort((a, b) => a.start - b.start);
  kicks.sort((a, b) => a - b);
  return { parts, drums, kicks, totalSamples: plan.totalSamples, samplesPerBeat: spb };
}
