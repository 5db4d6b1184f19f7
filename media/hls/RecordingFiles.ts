/**
 * How a recording lies on disk, shared by the node that writes it and the API that reads it
 * (both see the same blob directory). A recording is one folder,
 * `recordings/<streamId>/<recordingId>/`, holding:
 *
 * - `meta.json`: `{ id, streamId, startedAt, endedAt, state }` (written atomically: at the start,
 *   and again when the recording ends cleanly);
 * - `init-<initId>.mp4`: the fMP4 init segment of each encoder configuration used;
 * - one file per media segment, named with everything the index needs:
 *   `s<seq>-i<initId>-d<0|1>-t<startMs>-l<durationMs>-w<wallStartMs>-b<bytes>.m4s`.
 *
 * The folder listing *is* the index: every file is written under a hidden temp name and renamed
 * into place, so a listing never shows a partial file, and a node killed at any instant leaves a
 * recording that plays up to its last complete segment. Nothing else needs repairing.
 */

/** A media segment as its file name describes it. */
export interface RecordingSegmentFile {
  name: string;
  /** Order within the recording (from 0; gaps where retention or an overloaded disk dropped some). */
  seq: number;
  initId: number;
  /** Something happened before this segment (the publisher left and came back, or segments were lost). */
  discontinuity: boolean;
  /** Media time of the first sample, ms (the node's timeline; jumps across a discontinuity). */
  startMs: number;
  durationMs: number;
  /** ms epoch of the first sample. */
  wallStartMs: number;
  bytes: number;
}

export interface RecordingMeta {
  id: string;
  streamId: string;
  /** ms epoch. */
  startedAt: number;
  endedAt: number | null;
  /** `recording` while a node writes it; `complete` once it ended cleanly. */
  state: 'recording' | 'complete';
}

export const RECORDING_ID = /^rec_[A-Za-z0-9_-]{1,64}$/;
const SEGMENT_NAME = /^s(\d{1,12})-i(\d{1,6})-d([01])-t(\d{1,15})-l(\d{1,9})-w(\d{1,15})-b(\d{1,12})\.m4s$/;
const INIT_NAME = /^init-(\d{1,6})\.mp4$/;

/** Blob folder of a stream's recordings. */
export function recordingsDirKey(streamId: string): string {
  return `recordings/${streamId}`;
}

/** Blob folder of one recording. */
export function recordingDirKey(streamId: string, recordingId: string): string {
  return `recordings/${streamId}/${recordingId}`;
}

export function segmentFileName(s: Omit<RecordingSegmentFile, 'name'>): string {
  const n = (v: number) => String(Math.max(0, Math.round(v)));
  return `s${String(s.seq).padStart(8, '0')}-i${s.initId}-d${s.discontinuity ? 1 : 0}-t${n(s.startMs)}-l${n(s.durationMs)}-w${n(s.wallStartMs)}-b${s.bytes}.m4s`;
}

export function initFileName(initId: number): string {
  return `init-${initId}.mp4`;
}

export function parseSegmentFileName(name: string): RecordingSegmentFile | null {
  const m = SEGMENT_NAME.exec(name);
  if (!m) return null;
  return {
    name,
    seq: Number(m[1]),
    initId: Number(m[2]),
    discontinuity: m[3] === '1',
    startMs: Number(m[4]),
    durationMs: Number(m[5]),
    wallStartMs: Number(m[6]),
    bytes: Number(m[7]),
  };
}

export function parseInitFileName(name: string): number | null {
  const m = INIT_NAME.exec(name);
  return m ? Number(m[1]) : null;
}

/** A folder listing as a recording: its segments in order and the init segments present. */
export function readListing(names: readonly string[]): { segments: RecordingSegmentFile[]; inits: Set<number> } {
  const segments: RecordingSegmentFile[] = [];
  const inits = new Set<number>();
  for (const name of names) {
    const seg = parseSegmentFileName(name);
    if (seg) {
      segments.push(seg);
      continue;
    }
    const init = parseInitFileName(name);
    if (init !== null) inits.add(init);
  }
  segments.sort((a, b) => a.seq - b.seq);
  // A segment without its init cannot play (only if a sweep raced a write): left out.
  return { segments: segments.filter((s) => inits.has(s.initId)), inits };
}
