/**
 * Fragmented MP4 (ISO/IEC 14496-12, CMAF-style) writer for the HLS packager: one init segment
 * (ftyp + moov with an H.264 `avc1` track and an AAC-LC `mp4a` track) and `moof`+`mdat` fragments,
 * one per LL-HLS part. Only what our encoder produces is supported: H.264 without B-frames
 * (DTS = PTS, no `ctts`), AAC-LC with 1024-sample frames.
 *
 * Track 1 = video (timescale 90 kHz), track 2 = audio (timescale = sample rate). Sample data in
 * `mdat` is video first, then audio; each `trun` carries its own data offset from the `moof` start
 * (`default-base-is-moof`, as CMAF requires).
 */

export const VIDEO_TRACK_ID = 1;
export const AUDIO_TRACK_ID = 2;
export const VIDEO_TIMESCALE = 90_000;

export interface VideoConfig {
  width: number;
  height: number;
  sps: Uint8Array;
  pps: Uint8Array;
}

export interface AudioConfig {
  sampleRate: number;
  channels: number;
  /** AudioSpecificConfig (ISO 14496-3 §1.6.2.1), e.g. 0x1190 for AAC-LC 48 kHz stereo. */
  asc: Uint8Array;
}

export interface VideoSample {
  /** NAL units without start codes (written length-prefixed, AVCC). */
  nals: Uint8Array[];
  /** 90 kHz ticks. */
  duration: number;
  keyframe: boolean;
}

export interface Fragment {
  sequence: number;
  video: { baseTime: number; samples: VideoSample[] };
  /** Raw AAC frames, each `1024` samples long; baseTime in the audio timescale. */
  audio: { baseTime: number; frames: Uint8Array[] } | null;
}

function box(type: string, ...payload: Uint8Array[]): Buffer {
  const size = 8 + payload.reduce((n, p) => n + p.length, 0);
  const head = Buffer.alloc(8);
  head.writeUInt32BE(size, 0);
  head.write(type, 4, 'latin1');
  return Buffer.concat([head, ...payload], size);
}

function fullBox(type: string, version: number, flags: number, ...payload: Uint8Array[]): Buffer {
  const vf = Buffer.alloc(4);
  vf.writeUInt32BE(((version & 0xff) << 24) | (flags & 0xffffff), 0);
  return box(type, vf, ...payload);
}

function u8(...bytes: number[]): Buffer {
  return Buffer.from(bytes);
}

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n, 0);
  return b;
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
}

function u64(n: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(Math.max(0, Math.round(n))), 0);
  return b;
}

const MATRIX = Buffer.concat([u32(0x00010000), u32(0), u32(0), u32(0), u32(0x00010000), u32(0), u32(0), u32(0), u32(0x40000000)]);
/** ISO 639-2 "und" packed as three 5-bit letters. */
const LANG_UND = 0x55c4;

function avcC(v: VideoConfig): Buffer {
  return box(
    'avcC',
    u8(1, v.sps[1] ?? 0x42, v.sps[2] ?? 0, v.sps[3] ?? 0x1f, 0xff /* 4-byte NAL lengths */, 0xe1 /* 1 SPS */),
    u16(v.sps.length),
    v.sps,
    u8(1),
    u16(v.pps.length),
    v.pps,
  );
}

function videoTrak(v: VideoConfig): Buffer {
  const avc1 = box(
    'avc1',
    Buffer.alloc(6),
    u16(1), // data_reference_index
    Buffer.alloc(16),
    u16(v.width),
    u16(v.height),
    u32(0x00480000),
    u32(0x00480000),
    u32(0),
    u16(1), // frame_count
    Buffer.alloc(32), // compressorname
    u16(0x0018),
    u16(0xffff),
    avcC(v),
  );
  return trak(VIDEO_TRACK_ID, VIDEO_TIMESCALE, 'vide', 'VideoHandler', fullBox('vmhd', 0, 1, Buffer.alloc(8)), avc1, v.width, v.height, 0);
}

function descriptor(tag: number, ...payload: Uint8Array[]): Buffer {
  const len = payload.reduce((n, p) => n + p.length, 0);
  // 4-byte expandable size (ISO 14496-1 §8.3.3): what most muxers write, valid for any length < 2^28.
  return Buffer.concat([u8(tag, 0x80 | ((len >> 21) & 0x7f), 0x80 | ((len >> 14) & 0x7f), 0x80 | ((len >> 7) & 0x7f), len & 0x7f), ...payload]);
}

function audioTrak(a: AudioConfig): Buffer {
  const esds = fullBox(
    'esds',
    0,
    0,
    descriptor(
      3,
      u16(AUDIO_TRACK_ID),
      u8(0),
      descriptor(4, u8(0x40 /* MPEG-4 audio */, 0x15 /* audio stream */), u8(0, 0, 0), u32(0), u32(0), descriptor(5, a.asc)),
      descriptor(6, u8(2)),
    ),
  );
  const mp4a = box('mp4a', Buffer.alloc(6), u16(1), Buffer.alloc(8), u16(a.channels), u16(16), u16(0), u16(0), u32(a.sampleRate * 65536), esds);
  return trak(AUDIO_TRACK_ID, a.sampleRate, 'soun', 'SoundHandler', fullBox('smhd', 0, 0, Buffer.alloc(4)), mp4a, 0, 0, 0x0100);
}

function trak(id: number, timescale: number, handler: string, name: string, mediaHeader: Buffer, sampleEntry: Buffer, width: number, height: number, volume: number): Buffer {
  const tkhd = fullBox('tkhd', 0, 3, u32(0), u32(0), u32(id), u32(0), u32(0), Buffer.alloc(8), u16(0), u16(0), u16(volume), u16(0), MATRIX, u32(width * 65536), u32(height * 65536));
  const mdhd = fullBox('mdhd', 0, 0, u32(0), u32(0), u32(timescale), u32(0), u16(LANG_UND), u16(0));
  const hdlr = fullBox('hdlr', 0, 0, u32(0), Buffer.from(handler, 'latin1'), Buffer.alloc(12), Buffer.from(`${name}\0`, 'latin1'));
  const dinf = box('dinf', fullBox('dref', 0, 0, u32(1), fullBox('url ', 0, 1)));
  const stbl = box(
    'stbl',
    fullBox('stsd', 0, 0, u32(1), sampleEntry),
    fullBox('stts', 0, 0, u32(0)),
    fullBox('stsc', 0, 0, u32(0)),
    fullBox('stsz', 0, 0, u32(0), u32(0)),
    fullBox('stco', 0, 0, u32(0)),
  );
  return box('trak', tkhd, box('mdia', mdhd, hdlr, box('minf', mediaHeader, dinf, stbl)));
}

/** ftyp + moov for one video and (optionally) one audio track. */
export function initSegment(video: VideoConfig, audio: AudioConfig | null): Buffer {
  const ftyp = box('ftyp', Buffer.from('iso6', 'latin1'), u32(0), Buffer.from('iso6cmfcisomavc1', 'latin1'));
  const nextTrack = audio ? 3 : 2;
  const mvhd = fullBox('mvhd', 0, 0, u32(0), u32(0), u32(1000), u32(0), u32(0x00010000), u16(0x0100), Buffer.alloc(10), MATRIX, Buffer.alloc(24), u32(nextTrack));
  const trex = (id: number) => fullBox('trex', 0, 0, u32(id), u32(1), u32(0), u32(0), u32(0));
  const traks = [videoTrak(video), ...(audio ? [audioTrak(audio)] : [])];
  const mvex = box('mvex', trex(VIDEO_TRACK_ID), ...(audio ? [trex(AUDIO_TRACK_ID)] : []));
  return Buffer.concat([ftyp, box('moov', mvhd, ...traks, mvex)]);
}

// ISO 14496-12 §8.8.3.1 sample flags: depends_on (2 bits at 24), is_non_sync_sample (bit 16).
const SYNC_FLAGS = 0x02000000;
const NON_SYNC_FLAGS = 0x01010000;
const AAC_FRAME_SAMPLES = 1024;

/** trun with data-offset, per-sample duration, size and flags (flags 0x000701). */
function trun(entries: { duration: number; size: number; flags: number }[], dataOffset: number): Buffer {
  const body = Buffer.alloc(8 + entries.length * 12);
  body.writeUInt32BE(entries.length, 0);
  body.writeInt32BE(dataOffset, 4);
  entries.forEach((e, i) => {
    body.writeUInt32BE(e.duration >>> 0, 8 + i * 12);
    body.writeUInt32BE(e.size >>> 0, 12 + i * 12);
    body.writeUInt32BE(e.flags >>> 0, 16 + i * 12);
  });
  return fullBox('trun', 0, 0x000701, body);
}

function traf(trackId: number, baseTime: number, entries: { duration: number; size: number; flags: number }[], dataOffset: number): Buffer {
  // tfhd 0x020000: default-base-is-moof.
  return box('traf', fullBox('tfhd', 0, 0x020000, u32(trackId)), fullBox('tfdt', 1, 0, u64(baseTime)), trun(entries, dataOffset));
}

/** One `moof` + `mdat`. Data offsets are patched after the moof size is known (it does not depend on them). */
export function fragment(f: Fragment): Buffer {
  const videoData = f.video.samples.map((s) => {
    const parts: Uint8Array[] = [];
    for (const nal of s.nals) parts.push(u32(nal.length), nal);
    return Buffer.concat(parts);
  });
  const videoEntries = f.video.samples.map((s, i) => ({ duration: s.duration, size: videoData[i]?.length ?? 0, flags: s.keyframe ? SYNC_FLAGS : NON_SYNC_FLAGS }));
  const audioFrames = f.audio?.frames ?? [];
  const audioEntries = audioFrames.map((a) => ({ duration: AAC_FRAME_SAMPLES, size: a.length, flags: SYNC_FLAGS }));
  const build = (videoOffset: number, audioOffset: number) =>
    box(
      'moof',
      fullBox('mfhd', 0, 0, u32(f.sequence)),
      traf(VIDEO_TRACK_ID, f.video.baseTime, videoEntries, videoOffset),
      ...(f.audio && audioEntries.length > 0 ? [traf(AUDIO_TRACK_ID, f.audio.baseTime, audioEntries, audioOffset)] : []),
    );
  const moofSize = build(0, 0).length;
  const videoBytes = videoData.reduce((n, b) => n + b.length, 0);
  const moof = build(moofSize + 8, moofSize + 8 + videoBytes);
  const mdat = box('mdat', ...videoData, ...audioFrames);
  return Buffer.concat([moof, mdat]);
}

export const AAC_SAMPLES_PER_FRAME = AAC_FRAME_SAMPLES;
