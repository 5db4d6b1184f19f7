/**
 * What a decoded video frame is, wherever it goes: decoders give frames, processors transform
 * them, encoders take them.
 */
/**
 * Pixel layout of a frame's bytes:
 * - `RGB`: RGB24, row-major, no padding (`width × height × 3` bytes): what processors take;
 * - `I420`: planar Y, U, V at half resolution (`width × height × 3 / 2` bytes): what decoders
 *   give and encoders take, used end to end when a stream has nothing to process.
 */
export type PixelFormat = 'RGB' | 'I420';

/** Bytes of a frame of this size and layout. */
export function frameBytes(width: number, height: number, format: PixelFormat): number {
  return format === 'RGB' ? width * height * 3 : (width * height * 3) / 2;
}

/**
 * A decoded video frame, row-major, no padding. Processors only ever see RGB frames, which makes
 * them structurally identical to native's `Frame`.
 */
export interface Frame {
  /** Pixels. */
  width: number;
  /** Pixels. */
  height: number;
  data: Uint8Array;
  /**
   * Presentation time, ms on the media node's monotonic clock: a decoded frame's capture time (the
   * publisher's RTP time placed on that clock); processors pass it on unchanged.
   */
  ptsMs: number;
  /**
   * When viewers see the frame, ms epoch: its capture time as every output carries it (its output
   * time, OutputClock, which can sit up to a frame after the capture itself), what timed params and
   * audio mappings are placed by (set on the frames a processor is given; processors may ignore it).
   */
  capturedAt?: number;
  /**
   * Its params were set without all the publisher's audio of its time: the wait for it
   * (audioMappingWaitMs) ran out, so sound-reactive params follow that sound a frame late (set by
   * the node on the frames a processor is given; absent: nothing was waited for, or it came).
   */
  soundLate?: boolean;
  /** Default `RGB`. */
  format?: PixelFormat;
}
