/**
 * Whether a publisher's Opus RTP packet carries sound. An Opus packet of at most 3 bytes (the TOC
 * byte and up to two bytes of frame) holds no audible signal: it is DTX, or a CELT frame with the
 * silence flag, which is what encoders send for digital silence (a muted microphone, a scene with
 * no audio source). Encoding such a stream to AAC produces only silence, which the outputs already
 * fill in on their own, so the stream's AAC encoder waits for the first packet that carries sound.
 */

/** Largest Opus payload that carries no sound, bytes (TOC + a 2-byte silence frame). */
export const OPUS_SILENCE_MAX_BYTES = 3;

/** Payload bytes of an RTP packet (after the CSRCs and the header extension, before the padding); -1 when malformed. */
export function rtpPayloadBytes(rtp: Uint8Array): number {
  if (rtp.length < 12 || rtp[0]! >> 6 !== 2) return -1;
  let offset = 12 + (rtp[0]! & 0x0f) * 4;
  if (rtp[0]! & 0x10) {
    if (rtp.length < offset + 4) return -1;
    offset += 4 + ((rtp[offset + 2]! << 8) | rtp[offset + 3]!) * 4;
  }
  const padding = rtp[0]! & 0x20 ? rtp[rtp.length - 1]! : 0;
  const n = rtp.length - offset - padding;
  return n < 0 ? -1 : n;
}

/** The packet carries sound (more than a DTX or silence frame). */
export function opusCarriesSound(rtp: Uint8Array): boolean {
  return rtpPayloadBytes(rtp) > OPUS_SILENCE_MAX_BYTES;
}
