/**
 * FLV tags (Adobe FLV spec v10.1, E.4) for the RTMP push: H.264 (AVC, codec 7) and AAC (sound
 * format 10). Timestamps are ms (24 bits + 8 extended). Only what RtmpPush writes: the file header,
 * AVC/AAC sequence headers and coded frames; no onMetaData (ffmpeg's FLV muxer adds its own on the
 * RTMP side).
 */

/** 'FLV', version 1, audio+video flags, header size 9, then PreviousTagSize0. */
export function flvHeader(): Buffer {
  return Buffer.from([0x46, 0x4c, 0x56, 0x01, 0x05, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00]);
}

function tag(type: 8 | 9, timestampMs: number, data: Buffer): Buffer {
  const ts = Math.max(0, Math.round(timestampMs)) >>> 0;
  const head = Buffer.alloc(11);
  head.writeUInt8(type, 0);
  head.writeUIntBE(data.length, 1, 3);
  head.writeUIntBE(ts & 0xffffff, 4, 3);
  head.writeUInt8((ts >>> 24) & 0xff, 7);
  const prev = Buffer.alloc(4);
  prev.writeUInt32BE(11 + data.length, 0);
  return Buffer.concat([head, data, prev]);
}

/** AVCDecoderConfigurationRecord as an AVC sequence header tag. */
export function avcSequenceHeader(sps: Uint8Array, pps: Uint8Array): Buffer {
  const len = (n: number) => Buffer.from([(n >> 8) & 0xff, n & 0xff]);
  const record = Buffer.concat([
    Buffer.from([1, sps[1] ?? 0x42, sps[2] ?? 0, sps[3] ?? 0x1f, 0xff, 0xe1]),
    len(sps.length),
    sps,
    Buffer.from([1]),
    len(pps.length),
    pps,
  ]);
  return tag(9, 0, Buffer.concat([Buffer.from([0x17, 0x00, 0, 0, 0]), record]));
}

/** One access unit; NALs without start codes, written length-prefixed. */
export function avcFrame(nals: Uint8Array[], keyframe: boolean, timestampMs: number): Buffer {
  const parts: Uint8Array[] = [Buffer.from([keyframe ? 0x17 : 0x27, 0x01, 0, 0, 0])];
  for (const nal of nals) {
    const l = Buffer.alloc(4);
    l.writeUInt32BE(nal.length, 0);
    parts.push(l, nal);
  }
  return tag(9, timestampMs, Buffer.concat(parts));
}

// 0xAF: AAC, "44 kHz" (FLV's fixed value for AAC), 16-bit, stereo; the real rate is in the ASC.
export function aacSequenceHeader(asc: Uint8Array): Buffer {
  return tag(8, 0, Buffer.concat([Buffer.from([0xaf, 0x00]), asc]));
}

export function aacFrame(frame: Uint8Array, timestampMs: number): Buffer {
  return tag(8, timestampMs, Buffer.concat([Buffer.from([0xaf, 0x01]), frame]));
}
