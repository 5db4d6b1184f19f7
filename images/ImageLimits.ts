/**
 * The bounds on decoding an image a client sent (slate images, IP-Adapter style images). One
 * place for their defaults; operators override them through the IMAGE_* variables
 * (control/config.ts), which the API and media roles pass to their ImageDecoder.
 */
export interface ImageLimits {
  /**
   * Largest encoded image, bytes (default 5 MiB). Also the most any compressed PNG text or ICC
   * chunk may inflate to before it is refused: no metadata we read is larger than the image.
   */
  maxBytes: number;
  /** Largest image, pixels (default 4096², 16 777 216): refused from its header, before any pixel buffer. */
  maxPixels: number;
  /**
   * Decodes at once per process (default 2): each holds up to maxPixels × 4 bytes of libvips
   * buffers and a core, so this bounds both whatever a client sends at once.
   */
  concurrency: number;
  /** Decodes waiting for a slot (default 8); one more is refused at once as busy (503 + Retry-After). */
  queue: number;
  /** A decode running longer is abandoned, seconds (default 2; libvips counts whole seconds). */
  timeoutS: number;
}

export const DEFAULT_IMAGE_LIMITS: Readonly<ImageLimits> = Object.freeze({
  maxBytes: 5 * 1024 * 1024,
  maxPixels: 4096 * 4096,
  concurrency: 2,
  queue: 8,
  timeoutS: 2,
});
