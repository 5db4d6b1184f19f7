/**
 * Lays out sections (intro, main parts, outro) over a whole number of bars, per the genre's
 * template (reference songs.md §4.5), and picks a chord progression for each section.
 */
import type { Genre, Template } from './Genres.ts';
import type { Mode } from './Keys.ts';
import type { Random } from './Random.ts';

/**
 * 'intro' sparse opening; 'verse' main groove; 'chorus' fullest, with the lead; 'bridge' contrast,
 * lighter; 'build' rising tension before a drop (snare roll, filter opening); 'drop' EDM peak;
 * 'break' drums and bass out, pads and melody; 'outro' thinning out to a final chord; 'loop' the
 * single steady section of a seamless loop.
 */
export type SectionKind = 'intro' | 'verse' | 'chorus' | 'bridge' | 'build' | 'drop' | 'break' | 'outro' | 'loop';

export interface Layers {
  /** 0 off, 1 light (kick and hats), 2 full groove, 3 full with extra percussion. */
  drums: 0 | 1 | 2 | 3;
  bass: boolean;
  chords: boolean;
  pad: boolean;
  lead: boolean;
  arp: boolean;
}

export interface Section {
  kind: SectionKind;
  /** First bar (0-based) and length in bars. */
  startBar: number;
  bars: number;
  /** 0–1: drives velocity, filter brightness and density. */
  energy: number;
  /** Roman numerals, one chord per bar, repeated over the section. */
  progression: string[];
  layers: Layers;
  /** Extra style words asked for this section ('' when none); they adjust `layers` (styleLayers()). */
  style: string;
}

/**
 * A section a client asked for (POST /songs `sections`): its kind, length and energy are kept as
 * given. `name` as in the API's request body, so one shape holds from the HTTP body to the engine.
 */
export interface AskedSection {
  name: Exclude<SectionKind, 'loop'>;
  bars: number;
  /** 0–1. */
  energy: number;
  style?: string | undefined;
}

/**
 * Style words a section understands (case-insensitive, anywhere in its `style`), applied in this
 * order so that "sparse, with drums" means sparse but with drums:
 * - sparse / minimal / stripped / quiet: drums light at most, no pad, lead or arp;
 * - full / big / huge / everything: every layer, full drums;
 * - no drums / drumless, no bass, no lead / no melody, no arp, no pad: that layer off;
 * - drums, bass, lead / melody, arp / arpeggio, pad(s): that layer on.
 */
export function styleLayers(style: string, base: Layers, genreHasDrums: boolean): Layers {
  const l = { ...base };
  const w = ` ${style.toLowerCase().replace(/[^a-z]+/g, ' ')} `;
  const has = (re: RegExp) => re.test(w);
  if (has(/ (sparse|minimal|stripped|quiet) /)) {
    l.drums = Math.min(l.drums, 1) as Layers['drums'];
    l.pad = false;
    l.lead = false;
    l.arp = false;
  }
  if (has(/ (full|big|huge|everything) /)) Object.assign(l, { drums: genreHasDrums ? 3 : 0, bass: true, chords: true, pad: true, lead: true, arp: true });
  const toggle = (on: RegExp, off: RegExp, set: (v: boolean) => void) => {
    if (has(off)) set(false);
    else if (has(on)) set(true);
  };
  toggle(/ drums? /, / (no drums?|drumless|without drums?) /, (v) => (l.drums = v ? (Math.max(l.drums, 2) as Layers['drums']) : 0));
  toggle(/ bass /, / (no|without) bass /, (v) => (l.bass = v));
  toggle(/ (lead|melody) /, / (no|without) (lead|melody) /, (v) => (l.lead = v));
  toggle(/ (arp|arps|arpeggio|arpeggios) /, / (no|without) (arp|arps|arpeggio|arpeggios) /, (v) => (l.arp = v));
  toggle(/ pads? /, / (no|without) pads? /, (v) => (l.pad = v));
  return l;
}

const TEMPLATE_BODY: Record<Template, ReadonlyArray<[SectionKind, number]>> = {
  song: [['verse', 8], ['chorus', 8], ['verse', 8], ['chorus', 8], ['bridge', 8], ['chorus', 8], ['chorus', 8], ['verse', 8], ['chorus', 8]],
  edm: [['verse', 8], ['build', 4], ['drop', 8], ['break', 8], ['build', 4], ['drop', 8], ['drop', 8], ['break', 8], ['drop', 8], ['drop', 8]],
  through: [['verse', 8], ['chorus', 8], ['verse', 8], ['chorus', 8], ['bridge', 8], ['chorus', 8], ['chorus', 8], ['verse', 8], ['chorus', 8]],
};

function layersFor(kind: SectionKind, genre: Genre, energy: number, wantArp: boolean): Layers {
  const hasDrums = genre.drums !== 'none';
  const d = (n: 0 | 1 | 2 | 3): 0 | 1 | 2 | 3 => (hasDrums ? n : 0);
  const arp = wantArp;
  switch (kind) {
    case 'intro':
      return { drums: d(energy > 0.55 ? 1 : 0), bass: false, chords: true, pad: true, lead: false, arp: arp && energy > 0.5 };
    case 'verse':
      return { drums: d(2), bass: true, chords: true, pad: energy < 0.6, lead: genre.template === 'through', arp: arp && energy > 0.6 };
    case 'chorus':
      return { drums: d(3), bass: true, chords: true, pad: true, lead: true, arp };
    case 'bridge':
      return { drums: d(1), bass: true, chords: true, pad: true, lead: false, arp };
    case 'build':
      return { drums: d(1), bass: false, chords: true, pad: true, lead: false, arp: true };
    case 'drop':
      return { drums: d(3), bass: true, chords: true, pad: true, lead: true, arp };
    case 'break':
      return { drums: 0, bass: false, chords: true, pad: true, lead: true, arp: false };
    case 'outro':
      return { drums: d(1), bass: true, chords: true, pad: true, lead: false, arp: false };
    case 'loop':
      return { drums: d(energy > 0.6 ? 3 : 2), bass: true, chords: true, pad: true, lead: true, arp };
  }
}

const ENERGY_OFFSET: Record<SectionKind, number> = {
  intro: -0.25, verse: -0.05, chorus: 0.15, bridge: -0.1, build: 0, drop: 0.2, break: -0.2, outro: -0.2, loop: 0.05,
};

export interface ArrangeInput {
  bars: number;
  genre: Genre;
  mode: Mode;
  energy: number;
  loop: boolean;
  arp: boolean;
  rng: Random;
  /** Sections asked for by the client: used as given instead of the template (their bars sum to `bars`). */
  asked?: AskedSection[] | undefined;
}

/** Splits `bars` into sections; the sum of section bars is exactly `bars`. */
export function arrange(input: ArrangeInput): Section[] {
  const { bars, genre, energy, loop, rng } = input;
  const progs = genre.progressions[input.mode];
  const pickProg = (avoid?: string[]): string[] => {
    const options = progs.filter((p) => p !== avoid);
    return [...rng.pick(options.length > 0 ? options : progs)];
  };
  const verseProg = pickProg();
  const chorusProg = progs.length > 1 ? pickProg(verseProg) : verseProg;
  const bridgeProg = pickProg(chorusProg);
  const progFor = (kind: SectionKind): string[] => {
    switch (kind) {
      case 'chorus':
      case 'drop':
      case 'build':
        return chorusProg;
      case 'bridge':
      case 'break':
        return bridgeProg;
      default:
        return verseProg;
    }
  };

  if (input.asked && input.asked.length > 0) {
    const out: Section[] = [];
    let at = 0;
    for (const a of input.asked) {
      const e = Math.min(1, Math.max(0, a.energy));
      const style = (a.style ?? '').trim();
      out.push({
        kind: a.name,
        startBar: at,
        bars: a.bars,
        energy: Math.round(e * 100) / 100,
        progression: progFor(a.name),
        layers: styleLayers(style, layersFor(a.name, genre, e, input.arp), genre.drums !== 'none' || /\bdrums?\b/i.test(style)),
        style,
      });
      at += a.bars;
    }
    return out;
  }

  const plan: [SectionKind, number][] = [];
  if (loop) {
    // Loops repeat forever: steady energy, A/B halves when long enough, no intro or outro.
    if (bars < 12) plan.push(['loop', bars]);
    else {
      const a = Math.floor(bars / 2 / 4) * 4 || Math.floor(bars / 2);
      plan.push(['loop', a], ['chorus', bars - a]);
    }
  } else if (bars <= 6) {
    plan.push([genre.template === 'edm' ? 'drop' : 'chorus', bars]);
  } else {
    const edge = bars >= 24 ? 4 : bars >= 12 ? 2 : 1;
    const intro = edge;
    const outro = bars >= 10 ? edge : 0;
    let body = bars - intro - outro;
    plan.push(['intro', intro]);
    const seq = TEMPLATE_BODY[genre.template];
    let k = 0;
    const bodyParts: [SectionKind, number][] = [];
    while (body > 0) {
      const [kind, len0] = seq[k % seq.length] as [SectionKind, number];
      // Short songs use 4-bar parts so that verse and chorus both fit.
      const len = Math.min(bars < 24 && len0 === 8 ? 4 : len0, body);
      bodyParts.push([kind, len]);
      body -= len;
      k++;
    }
    // A tail shorter than 4 bars joins the part before it.
    const last = bodyParts[bodyParts.length - 1];
    if (bodyParts.length > 1 && last && last[1] < 4) {
      bodyParts.pop();
      const prev = bodyParts[bodyParts.length - 1] as [SectionKind, number];
      prev[1] += last[1];
    }
    // An EDM body should not end on a build.
    const tail = bodyParts[bodyParts.length - 1];
    if (tail && tail[0] === 'build') tail[0] = 'drop';
    plan.push(...bodyParts);
    if (outro > 0) plan.push(['outro', outro]);
  }

  const sections: Section[] = [];
  let start = 0;
  for (const [kind, len] of plan) {
    const e = Math.min(1, Math.max(0.05, energy + ENERGY_OFFSET[kind]));
    sections.push({
      kind,
      startBar: start,
      bars: len,
      energy: Math.round(e * 100) / 100,
      progression: progFor(kind),
      layers: layersFor(kind, genre, e, input.arp),
      style: '',
    });
    start += len;
  }
  return sections;
}
