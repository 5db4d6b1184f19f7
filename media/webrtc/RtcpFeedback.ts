/**
 * What a viewer's RTCP says about how its link carries our video: receiver reports (RFC 3550
 * §6.4.2: the fraction lost since the last report, for our SSRC) and REMB (PSFB FMT 15,
 * draft-alvestrand-rmcat-remb: the receiver's estimate of the bit rate its link carries, which
 * Chromium sends when `goog-remb` is negotiated, as libdatachannel's answers do for H.264).
 */

export interface RtcpFeedback {
  /** Fraction of our video packets lost since the viewer's previous report (0–1); undefined: no report about our SSRC. */
  fractionLost?: number;
  /** The viewer's receive-side estimate, bit/s; undefined: no REMB in this packet. */
  rembBps?: number;
}

/** Reads receiver reports (PT 201, and the report blocks of sender reports, PT 200) and REMB from a compound RTCP packet. */
export function readRtcpFeedback(rtcp: Buffer, videoSsrc: number): RtcpFeedback {
  const out: RtcpFeedback = {};
  for (let i = 0; i + 4 <= rtcp.length; ) {
    const count = (rtcp[i] as number) & 0x1f;
    const pt = rtcp[i + 1] as number;
    const end = i + (rtcp.readUInt16BE(i + 2) + 1) * 4;
    if (end > rtcp.length) break;
    if (pt === 200 || pt === 201) {
      // Report blocks of 24 bytes after the sender's SSRC (RR) or its 20-byte sender info (SR).
      const first = i + (pt === 200 ? 28 : 8);
      for (let b = 0; b < count && first + (b + 1) * 24 <= end; b++) {
        const at = first + b * 24;
        if (rtcp.readUInt32BE(at) === videoSsrc >>> 0) out.fractionLost = (rtcp[at + 4] as number) / 256;
      }
    } else if (pt === 206 && count === 15 && end - i >= 20 && rtcp.toString('latin1', i + 12, i + 16) === 'REMB') {
      // Exponent (6 bits) and mantissa (18 bits) after the SSRC count.
      const exp = (rtcp[i + 17] as number) >> 2;
      const mantissa = (((rtcp[i + 17] as number) & 0x03) << 16) | rtcp.readUInt16BE(i + 18);
      out.rembBps = mantissa * 2 ** exp;
    }
    i = end;
  }
  return out;
}
