/**
 * RTCP sender reports for a viewer's tracks (RFC 3550 §6.4.1): each says which wall-clock time
 * (NTP format) one of the track's RTP timestamps stands for. A player puts tracks of one CNAME on
 * one timeline by them: without them a browser plays each track as soon as it can, so the
 * publisher's sound, passed straight through, led the picture by the whole pipeline's delay.
 *
 * Our reports give every track's **capture** time on one clock (the node's, as epoch ms), not the
 * time the report is sent (libdatachannel's RtcpSrReporter does that): the video leaves the node a
 * pipeline's delay after the sound of the same moment, so send-time reports would keep them apart.
 * How each track's RTP time maps to capture time is the stream's business (`SenderClock`).
 *
 * A report goes out with the track's media at most once a `SENDER_REPORT_INTERVAL_MS` (no timer):
 * a few dozen bytes a second per track against ≈ 190 kB/s of video.
 */

/** How often a track's report goes out with its media, ms (RFC 3550's 5 s minimum is for RTCP that scales with members; a player needs two reports to fit a clock, so the first lip-sync comes ≈ 1 s in). */
export const SENDER_REPORT_INTERVAL_MS = 1000;
/** Seconds from the NTP epoch (1900) to the Unix epoch. */
const NTP_UNIX_OFFSET_S = 2_208_988_800;
const RTCP_SR = 200;
const RTCP_SDES = 202;
const SDES_CNAME = 1;

/** Where a track's RTP time is now: the RTP timestamp of media captured at `nowMs` (the node's monotonic clock, ms); null while unknown. */
export interface SenderClock {
  video(nowMs: number): number;
  audio(nowMs: number): number | null;
}

/** The pair a sender report carried: an RTP timestamp and the capture time it stands for (epoch ms). */
export interface ReportedTime {
  rtp: number;
  ntpMs: number;
}

/**
 * A compound RTCP packet: a sender report (no reception blocks) for `ssrc`, mapping `rtp` to
 * `ntpMs` (epoch ms), with the track's sent packet and payload-octet counts, and an SDES with its
 * CNAME (what a receiver groups tracks by).
 */
export function senderReport(ssrc: number, time: ReportedTime, packets: number, octets: number, cname: string): Buffer {
  const name = Buffer.from(cname, 'utf8').subarray(0, 255);
  // SDES chunk: SSRC, CNAME item (type, length, text), then 1–4 zero bytes (the list's end) to a 32-bit boundary.
  const chunk = 4 + 2 + name.length;
  const sdesLen = 4 + chunk + (4 - (chunk % 4));
  const out = Buffer.alloc(28 + sdesLen);
  out[0] = 0x80; // V=2, P=0, RC=0
  out[1] = RTCP_SR;
  out.writeUInt16BE(6, 2); // length in 32-bit words − 1
  out.writeUInt32BE(ssrc >>> 0, 4);
  const seconds = Math.floor(time.ntpMs / 1000);
  out.writeUInt32BE((seconds + NTP_UNIX_OFFSET_S) >>> 0, 8);
  out.writeUInt32BE(Math.floor(((time.ntpMs - seconds * 1000) / 1000) * 2 ** 32) >>> 0, 12);
  out.writeUInt32BE(time.rtp >>> 0, 16);
  out.writeUInt32BE(packets >>> 0, 20);
  out.writeUInt32BE(octets >>> 0, 24);
  const s = 28;
  out[s] = 0x81; // V=2, P=0, SC=1
  out[s + 1] = RTCP_SDES;
  out.writeUInt16BE(sdesLen / 4 - 1, s + 2);
  out.writeUInt32BE(ssrc >>> 0, s + 4);
  out[s + 8] = SDES_CNAME;
  out[s + 9] = name.length;
  name.copy(out, s + 10);
  return out;
}

/** The (RTP timestamp, epoch ms) pair of a sender report, as a receiver reads it; null if `rtcp` holds none for `ssrc`. */
export function readSenderReport(rtcp: Buffer, ssrc?: number): ReportedTime & { ssrc: number; packets: number; octets: number } | null {
  for (let i = 0; i + 8 <= rtcp.length; ) {
    const words = rtcp.readUInt16BE(i + 2);
    if (rtcp[i + 1] === RTCP_SR && i + 28 <= rtcp.length) {
      const s = rtcp.readUInt32BE(i + 4);
      if (ssrc === undefined || s === ssrc) {
        const ntpMs = (rtcp.readUInt32BE(i + 8) - NTP_UNIX_OFFSET_S) * 1000 + (rtcp.readUInt32BE(i + 12) / 2 ** 32) * 1000;
        return { ssrc: s, ntpMs, rtp: rtcp.readUInt32BE(i + 16), packets: rtcp.readUInt32BE(i + 20), octets: rtcp.readUInt32BE(i + 24) };
      }
    }
    i += (words + 1) * 4;
  }
  return null;
}
