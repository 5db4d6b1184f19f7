/**
 * A decoded video frame as it travels between the media node and the inference engine.
 * RGB24, row-major, no row padding: `data.length === width * height * 3`.
 */
export interface Frame {
  /** Pixels. */
  width: number;
  /** Pixels. */
  height: number;
  /** RGB24 bytes, row-major, no padding. */
  data: Uint8Array;
  /** Presentation timestamp in milliseconds; carried through unchanged by every stage. */
  ptsMs: number;
}

/** A latent tensor (NCHW float32), the unit latent processors work on. */
export interface LatentTensor {
  data: Float32Array;
  /** [batch, channels, height, width] */
  dims: readonly number[];
}

/** Allocates a black frame. */
export function createFrame(width: number, height: number, ptsMs = 0): Frame {
  return { width, height, data: new Uint8Array(width * height * 3), ptsMs };
}

/** Throws unless `frame.data` holds exactly width×height RGB24 pixels. */
export function assertFrame(frame: Frame): void {
  const { width, height, data } = frame;
  if (!Number.isInteger(width) || !Number.isInteger(height) || width <= 0 || height <= 0) {
    throw new RangeError(`frame size must be positive integers [width:${width}] [height:${height}]`);
  }
  if (data.length !== width * height * 3) {
    throw new RangeError(`frame data length ${data.length} != ${width}x${height}x3`);
  }
}
