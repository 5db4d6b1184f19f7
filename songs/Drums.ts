/**
 * Drum grids per feel (16 steps per bar; reference songs.md §4.4) with fills, crashes and builds.
 * Returns hits in steps; the composer turns them into samples (with swing and humanising).
 */
import type { DrumFeel } from './Genres.ts';
import type { Random } from './Random.ts';

/** One-shot sounds in DrumKit.ts. */
export type DrumKind = 'kick' | 'snare' | 'clap' | 'hat' | 'openhat' | 'ride' | 'crash' | 'rim' | 'tom' | 'lowtom' | 'shaker';

export interface StepHit {
  /** Position in 16ths from the bar start; fractions allowed (rolls). */
  step: number;
  kind: DrumKind;
  vel: number;
}

/** Grid strings: 'x' hit, 'o' soft (ghost), '.' rest. */
interface Grid {
  kick: string;
  snare: string;
  hat: string;
  openhat?: string;
  clap?: string;
  rim?: string;
  ride?: string;
  shaker?: string;
  tom?: string;
  lowtom?: string;
}

const GRIDS: Record<Exclude<DrumFeel, 'none'>, readonly Grid[]> = {
  boombap: [
    { kick: 'x.........x.....', snare: '....x.......x...', hat: 'x.x.x.x.x.x.x.x.', rim: '.......o......o.' },
    { kick: 'x......x..x.....', snare: '....x.......x..o', hat: 'x.x.x.x.x.x.x.xo' },
    { kick: 'x.....x...x..x..', snare: '....x.......x...', hat: 'x.xox.x.x.xox.x.' },
  ],
  trap: [
    { kick: 'x.......x.....x.', snare: '........x.......', hat: 'xxxxxxxxxxxxxxxx', clap: '........x.......' },
    { kick: 'x.....x...x.....', snare: '........x.......', hat: 'x.x.x.xxx.x.x.xx', clap: '........x.......' },
    { kick: 'x..x......x..x..', snare: '........x.......', hat: 'x.xxx.x.x.xxx.x.', clap: '........x.......' },
  ],
  fourfloor: [
    { kick: 'x...x...x...x...', snare: '................', clap: '....x.......x...', hat: '..x...x...x...x.', openhat: '..x...x...x...x.' },
    { kick: 'x...x...x...x...', snare: '................', clap: '....x.......x...', hat: 'xxxxxxxxxxxxxxxx', openhat: '..x...x...x...x.' },
    { kick: 'x...x...x...x...', snare: '................', clap: '....x.......x...', hat: 'x.x.x.x.x.x.x.x.', openhat: '..x...x...x...x.', shaker: 'oxoxoxoxoxoxoxox' },
  ],
  techno: [
    { kick: 'x...x...x...x...', snare: '................', clap: '....x.......x...', hat: 'xxxxxxxxxxxxxxxx', openhat: '..x...x...x...x.' },
    { kick: 'x...x...x...x...', snare: '................', clap: '............x...', hat: 'x.xxx.xxx.xxx.xx', openhat: '..x...x...x...x.', rim: '...o..o....o..o.' },
  ],
  breakbeat: [
    { kick: 'x.........x.....', snare: '....x.......x...', hat: 'x.x.x.x.x.x.x.x.', shaker: 'xxxxxxxxxxxxxxxx' },
    { kick: 'x.........xx....', snare: '....x..o....x..o', hat: 'x.x.x.x.x.x.x.x.', openhat: '..............x.' },
    { kick: 'x.x.......x.....', snare: '....x.o.....x...', hat: 'xxxxxxxxxxxxxxxx' },
  ],
  halftime: [
    { kick: 'x.........x.....', snare: '........x.......', hat: 'x.x.x.x.x.x.x.x.', clap: '........x.......' },
    { kick: 'x.....x.........', snare: '........x.......', hat: 'x...x...x...x...', openhat: '..............x.' },
  ],
  backbeat: [
    { kick: 'x.......x.......', snare: '....x.......x...', hat: 'x.x.x.x.x.x.x.x.' },
    { kick: 'x.......x.x.....', snare: '....x.......x...', hat: 'x.x.x.x.x.x.x.x.' },
    { kick: 'x......xx.......', snare: '....x.......x...', hat: 'x.x.x.x.x.x.x.x.', openhat: '..............x.' },
  ],
  disco: [
    { kick: 'x...x...x...x...', snare: '....x.......x...', hat: 'xxxxxxxxxxxxxxxx', openhat: '..x...x...x...x.' },
    { kick: 'x...x...x...x...', snare: '....x.......x...', hat: 'x.xxx.xxx.xxx.xx', openhat: '..x...x...x...x.', shaker: 'oxoxoxoxoxoxoxox' },
  ],
  onedrop: [
    { kick: '........x.......', snare: '................', rim: '........x.......', hat: 'x.x.x.x.x.x.x.x.' },
    { kick: '........x.......', snare: '................', rim: '........x.......', hat: 'x.xox.xox.xox.xo' },
  ],
  jazz: [
    { kick: 'o.......o.......', snare: '......o.......o.', hat: '....x.......x...', ride: 'x..xx..xx..xx..x' },
    { kick: 'o.....o.........', snare: '.........o....o.', hat: '....x.......x...', ride: 'x..xx..xx..xx..x' },
  ],
  cinematic: [
    { kick: 'x.......x.......', snare: '................', hat: '................', tom: '......x.......x.', lowtom: 'x.......x..x....' },
    { kick: 'x.....x.x.......', snare: '............x...', hat: '................', tom: '..x.......x.....', lowtom: 'x.....x.x.......' },
  ],
};

const KINDS: readonly (keyof Grid)[] = ['kick', 'snare', 'clap', 'hat', 'openhat', 'rim', 'ride', 'shaker', 'tom', 'lowtom'];

export interface DrumBarInput {
  feel: DrumFeel;
  /** 0 off, 1 light, 2 full, 3 full + extra percussion. */
  level: 0 | 1 | 2 | 3;
  /** Index of the section's grid variant (chosen once per section). */
  variant: number;
  /** Bar position in its section and the section's length, for fills and crashes. */
  barInSection: number;
  sectionBars: number;
  /** 'build' sections get a snare roll that speeds up. */
  build: boolean;
  /** Last bar of a non-loop song: crash only. */
  final: boolean;
  rng: Random;
}

export function variantCount(feel: DrumFeel): number {
  return feel === 'none' ? 1 : GRIDS[feel].length;
}

/** Hits of one bar. */
export function drumBar(input: DrumBarInput): StepHit[] {
  const { feel, level, rng } = input;
  const hits: StepHit[] = [];
  if (feel === 'none' || level === 0) {
    if (input.build) addBuildRoll(hits, input);
    return hits;
  }
  if (input.final) {
    hits.push({ step: 0, kind: 'crash', vel: 0.8 }, { step: 0, kind: 'kick', vel: 0.9 });
    return hits;
  }
  const grids = GRIDS[feel];
  const grid = grids[input.variant % grids.length] as Grid;
  const fillBar = (input.barInSection + 1) % 4 === 0 && (input.barInSection + 1 === input.sectionBars || (input.barInSection + 1) % 8 === 0);
  for (const kind of KINDS) {
    const row = grid[kind];
    if (!row) continue;
    // Light level: kick, hats and ride only (plus the one-drop rim).
    if (level === 1 && !(kind === 'kick' || kind === 'hat' || kind === 'ride' || (feel === 'onedrop' && kind === 'rim'))) continue;
    if (level < 3 && kind === 'shaker') continue;
    for (let s = 0; s < 16; s++) {
      const c = row[s];
      if (c !== 'x' && c !== 'o') continue;
      // Fills replace the last beat of snare/hat rows.
      if (fillBar && level >= 2 && s >= 12 && (kind === 'snare' || kind === 'hat' || kind === 'openhat' || kind === 'clap')) continue;
      let vel = c === 'x' ? 0.85 : 0.35;
      if (kind === 'hat') vel *= s % 4 === 0 ? 1 : s % 2 === 0 ? 0.8 : 0.6;
      hits.push({ step: s, kind, vel: vel * (0.9 + 0.2 * rng.next()) });
    }
  }
  // Trap hat rolls: a 32nd-note burst at the end of some bars.
  if (feel === 'trap' && level >= 2 && rng.chance(0.5)) {
    const at = rng.pick([6, 10, 14]);
    for (let k = 0; k < 4; k++) hits.push({ step: at + k * 0.5, kind: 'hat', vel: 0.5 + 0.1 * k });
  }
  if (input.barInSection === 0 && level >= 2) hits.push({ step: 0, kind: 'crash', vel: 0.7 });
  if (fillBar && level >= 2) {
    const style = rng.int(3);
    for (let s = 12; s < 16; s++) {
      if (style === 0) hits.push({ step: s, kind: 'snare', vel: 0.5 + 0.1 * (s - 12) });
      else if (style === 1) hits.push({ step: s, kind: s < 14 ? 'tom' : 'lowtom', vel: 0.75 });
      else if (s % 2 === 0) hits.push({ step: s, kind: 'snare', vel: 0.7 }, { step: s + 1, kind: 'snare', vel: 0.4 });
    }
  }
  if (input.build) addBuildRoll(hits, input);
  return hits;
}

/** Snare roll: quarters, then 8ths, then 16ths over the section, rising in velocity. */
function addBuildRoll(hits: StepHit[], input: DrumBarInput): void {
  const progress = (input.barInSection + 1) / input.sectionBars;
  const every = progress <= 0.25 ? 4 : progress <= 0.5 ? 2 : 1;
  for (let s = 0; s < 16; s += every) {
    const p = (input.barInSection + s / 16) / input.sectionBars;
    hits.push({ step: s, kind: 'snare', vel: 0.3 + 0.6 * p });
  }
}
