/** The video codecs the node takes and sends, and the bitstream facts more than one part reads. */

/** The codecs of a publisher's and a viewer's video. */
export type VideoCodec = 'VP8' | 'H264';

/** True if a VP8 frame (RFC 6386 §9.1 frame tag) is a key frame: bit 0 of byte 0 is 0 (P bit inverted). */
export function isVp8Keyframe(frame: Uint8Array): boolean {
  return frame.length > 0 && ((frame[0] as number) & 0x01) === 0;
}
