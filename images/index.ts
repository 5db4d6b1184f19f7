/**
 * Client images, decoded in-process under byte, pixel, concurrency and time caps. Used by the
 * API (slate images), the media node (the stored slate picture) and the engine (style images).
 */
export { ImageDecoder, sniffImageFormat, type DecodeTarget, type ImageDecoderStats, type ImageFit, type ImageFormat, type Rgb, type RgbImage } from './ImageDecoder.ts';
export { DEFAULT_IMAGE_LIMITS, type ImageLimits } from './ImageLimits.ts';
export { ImageBusyError, ImageRejectedError } from './errors.ts';
