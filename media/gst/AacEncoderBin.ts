/**
 * The publisher's Opus → AAC-LC, once per stream, for the outputs that need AAC (HLS, RTMP/FLV).
 * WHEP viewers keep getting the Opus RTP passed through; this bin only exists while an HLS or
 * RTMP output runs.
 *
 *   appsrc (Opus RTP, leaky, bounded) ! rtpopusdepay ! opusdec plc=true ! audioconvert
 *     ! audioresample ! audio/x-raw,rate=48000,channels=2 ! avenc_aac bitrate=128000
 *     ! aacparse ! audio/mpeg,stream-format=adts ! appsink
 *
 * With a soundtrack the input is the mix instead (`payloadType: 'pcm'`: 48 kHz interleaved
 * stereo int16, media/stream/SoundtrackMixer.ts), converted to the float samples avenc_aac takes.
 *
 * ADTS frames reach Node one per appsink buffer; we strip the 7/9-byte header (the fMP4 and FLV
 * writers want raw frames plus the AudioSpecificConfig, which is fixed: AAC-LC 48 kHz stereo).
 */
import type { Logger } from 'pino';
import { AppPipeline } from './AppPipeline.ts';
import { InvalidStateError } from '../errors.ts';

export const AAC_SAMPLE_RATE = 48_000;
export const AAC_CHANNELS = 2;
/** AudioSpecificConfig: AOT 2 (LC), frequency index 3 (48 kHz), channel configuration 2. */
export const AAC_ASC = Uint8Array.from([0x11, 0x90]);
/**
 * One raw AAC-LC frame (1024 samples) of digital silence for 48 kHz stereo, as avenc_aac encodes
 * it: the HLS/RTMP outputs fill gaps with it when the publisher sends no audio.
 */
export const AAC_SILENT_FRAME = Uint8Array.from([0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c]);

export interface AacEncoderBinOptions {
  /** RTP payload type of the publisher's Opus, or `pcm` for 48 kHz interleaved stereo int16. */
  payloadType: number | 'pcm';
  bitrateBps?: number;
  logger: Logger;
  /** Raw AAC frame (no ADTS header), on the main thread. */
  onFrame: (frame: Uint8Array, atMs: number) => void;
}

/** Splits one appsink buffer into raw AAC frames (normally exactly one ADTS frame). */
export function adtsFrames(buf: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  let i = 0;
  while (i + 7 <= buf.length) {
    if (buf[i] !== 0xff || ((buf[i + 1] ?? 0) & 0xf6) !== 0xf0) break;
    const protectionAbsent = (buf[i + 1] ?? 0) & 1;
    const len = (((buf[i + 3] ?? 0) & 0x03) << 11) | ((buf[i + 4] ?? 0) << 3) | ((buf[i + 5] ?? 0) >> 5);
    const header = protectionAbsent ? 7 : 9;
    if (len < header || i + len > buf.length) break;
    out.push(buf.subarray(i + header, i + len));
    i += len;
  }
  return out;
}

export class AacEncoderBin {
  readonly #bin: AppPipeline;
  framesOut = 0;

  constructor(opts: AacEncoderBinOptions) {
    const raw = `audio/x-raw,format=S16LE,layout=interleaved,rate=${AAC_SAMPLE_RATE},channels=${AAC_CHANNELS}`;
    const source =
      opts.payloadType === 'pcm'
        ? `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-bytes=400000 caps="${raw}" ! audioconvert `
        : `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-bytes=200000 ` +
          `caps="application/x-rtp,media=(string)audio,clock-rate=(int)48000,encoding-name=(string)OPUS,payload=(int)${opts.payloadType}" ` +
          `! rtpopusdepay ! opusdec plc=true ! audioconvert ! audioresample ! audio/x-raw,rate=${AAC_SAMPLE_RATE},channels=${AAC_CHANNELS} `;
    const launch =
      source +
      `! avenc_aac bitrate=${opts.bitrateBps ?? 128_000} ! aacparse ! audio/mpeg,mpegversion=4,stream-format=adts ` +
      `! appsink name=sink sync=false max-buffers=50 drop=true`;
    this.#bin = new AppPipeline({
      launch,
      what: 'AAC encoder',
      logger: opts.logger,
      onSample: (buf) => {
        const atMs = performance.now();
        for (const frame of adtsFrames(buf)) {
          this.framesOut++;
          opts.onFrame(frame, atMs);
        }
      },
    });
    opts.logger.debug(`AacEncoderBin() | started [pt:${opts.payloadType}]`);
  }

  /** Feeds one serialized Opus RTP packet (or, with `pcm`, a block of samples). */
  push(rtp: Uint8Array): void {
    if (this.#bin.closed) throw new InvalidStateError('AAC encoder closed');
    this.#bin.push(rtp);
  }

  get closed(): boolean {
    return this.#bin.closed;
  }

  close(): void {
    this.#bin.close();
  }
}
