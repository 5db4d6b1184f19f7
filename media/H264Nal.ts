/**
 * H.264 NAL units (ITU-T H.264 §7.4.1, RFC 6184 §5.2): the unit types we act on, Annex-B splitting,
 * and the SPS fields we read. The one place these numbers live; packetizers, muxers and the HLS
 * packager name them from here.
 */

/**
 * NAL unit type (nal_unit_type, the low 5 bits of the header byte):
 * - 1–5 are slices (5: an IDR slice, the start of a key frame);
 * - 7/8 are parameter sets (decoders need both before the first slice);
 * - 9 is an access unit delimiter (Annex-B framing only, not needed over RTP);
 * - 24/28 exist only in RTP payloads (RFC 6184 §5.7.1 STAP-A, §5.8 FU-A).
 */
export const NAL_IDR = 5;
export const NAL_SEI = 6;
export const NAL_SPS = 7;
export const NAL_PPS = 8;
export const NAL_AUD = 9;
export const NAL_STAP_A = 24;
export const NAL_FU_A = 28;

/** Mask of nal_unit_type in the NAL header byte (the rest is F and NRI). */
export const NAL_TYPE_MASK = 0x1f;
/** Mask of forbidden_zero_bit and nal_ref_idc in the NAL header byte. */
export const NAL_F_NRI_MASK = 0xe0;

/** nal_unit_type of a NAL unit (0 for an empty one). */
export function nalType(nal: Uint8Array): number {
  return (nal[0] ?? 0) & NAL_TYPE_MASK;
}

/** Splits an Annex-B byte stream into NAL units (start codes removed). */
export function splitAnnexB(au: Uint8Array): Uint8Array[] {
  const nals: Uint8Array[] = [];
  let start = -1;
  let i = 0;
  const n = au.length;
  while (i + 2 < n) {
    if (au[i] === 0 && au[i + 1] === 0 && (au[i + 2] === 1 || (au[i + 2] === 0 && i + 3 < n && au[i + 3] === 1))) {
      const scLen = au[i + 2] === 1 ? 3 : 4;
      if (start >= 0) nals.push(au.subarray(start, trimTrailingZeros(au, start, i)));
      i += scLen;
      start = i;
    } else {
      i++;
    }
  }
  if (start >= 0 && start < n) nals.push(au.subarray(start, n));
  return nals.filter((nal) => nal.length > 0);
}

function trimTrailingZeros(b: Uint8Array, from: number, to: number): number {
  let end = to;
  while (end > from && b[end - 1] === 0) end--;
  return end;
}

/** True if the access unit holds an IDR slice. */
export function isH264Keyframe(nals: readonly Uint8Array[]): boolean {
  return nals.some((nal) => nalType(nal) === NAL_IDR);
}

/** Width/height from an H.264 SPS (ITU-T H.264 §7.3.2.1.1), enough for the avc1 sample entry. */
export function spsSize(sps: Uint8Array): { width: number; height: number } {
  // Remove emulation-prevention bytes (00 00 03 → 00 00).
  const rbsp: number[] = [];
  for (let i = 1; i < sps.length; i++) {
    if (i >= 3 && sps[i] === 3 && sps[i - 1] === 0 && sps[i - 2] === 0) continue;
    rbsp.push(sps[i] ?? 0);
  }
  let bit = 0;
  const u = (n: number) => {
    let v = 0;
    for (let i = 0; i < n; i++) {
      v = (v << 1) | (((rbsp[bit >> 3] ?? 0) >> (7 - (bit & 7))) & 1);
      bit++;
    }
    return v;
  };
  const ue = () => {
    let zeros = 0;
    while (u(1) === 0 && zeros < 32) zeros++;
    return (1 << zeros) - 1 + u(zeros);
  };
  const se = () => {
    const k = ue();
    return k & 1 ? (k + 1) / 2 : -(k / 2);
  };
  const profile = u(8);
  u(16); // constraint flags + level
  ue(); // sps id
  let chroma = 1;
  if ([100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135].includes(profile)) {
    chroma = ue();
    if (chroma === 3) u(1);
    ue();
    ue();
    u(1);
    if (u(1)) {
      for (let i = 0; i < (chroma !== 3 ? 8 : 12); i++) {
        if (u(1)) {
          let last = 8;
          let next = 8;
          for (let j = 0; j < (i < 6 ? 16 : 64); j++) {
            if (next !== 0) next = (last + se() + 256) % 256;
            last = next === 0 ? last : next;
          }
        }
      }
    }
  }
  ue(); // log2_max_frame_num
  const pocType = ue();
  if (pocType === 0) ue();
  else if (pocType === 1) {
    u(1);
    se();
    se();
    const n = ue();
    for (let i = 0; i < n; i++) se();
  }
  ue(); // max_num_ref_frames
  u(1);
  const wMbs = ue() + 1;
  const hMapUnits = ue() + 1;
  const frameMbsOnly = u(1);
  if (!frameMbsOnly) u(1);
  u(1);
  let [cl, cr, ct, cb] = [0, 0, 0, 0];
  if (u(1)) {
    cl = ue();
    cr = ue();
    ct = ue();
    cb = ue();
  }
  const cropX = chroma === 0 ? 1 : 2;
  const cropY = (chroma === 1 ? 2 : 1) * (2 - frameMbsOnly);
  return { width: wMbs * 16 - (cl + cr) * cropX, height: hMapUnits * 16 * (2 - frameMbsOnly) - (ct + cb) * cropY };
}
