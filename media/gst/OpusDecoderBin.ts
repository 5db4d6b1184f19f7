/**
 * The publisher's Opus → PCM (48 kHz interleaved stereo int16), for the soundtrack's mix. Only
 * exists while a soundtrack plays over a publisher's audio (otherwise the AAC encoder takes the
 * Opus RTP directly, media/gst/AacEncoderBin.ts).
 *
 *   appsrc (Opus RTP, leaky, bounded) ! rtpopusdepay ! opusdec plc=true ! audioconvert
 *     ! audioresample ! audio/x-raw,format=S16LE,rate=48000,channels=2 ! appsink
 */
import type { Logger } from 'pino';
import { AppPipeline } from './AppPipeline.ts';
import { InvalidStateError } from '../errors.ts';

/** Hz: Opus's own rate (RFC 6716 §2.1.3), and the PCM every audio path of the node shares (the soundtrack's mix, AAC). */
export const OPUS_PCM_RATE = 48_000;

export interface OpusDecoderBinOptions {
  /** RTP payload type of the publisher's Opus. */
  payloadType: number;
  /** Channels of the PCM handed out (default 2; 1: Opus decodes to mono itself, for analysis). */
  channels?: 1 | 2;
  logger: Logger;
  /** Decoded samples (int16, interleaved when stereo; a copy the caller may keep), on the main thread. */
  onPcm: (pcm: Int16Array) => void;
}

export class OpusDecoderBin {
  readonly #bin: AppPipeline;

  constructor(opts: OpusDecoderBinOptions) {
    const caps = `application/x-rtp,media=(string)audio,clock-rate=(int)48000,encoding-name=(string)OPUS,payload=(int)${opts.payloadType}`;
    const launch =
      `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-bytes=200000 caps="${caps}" ` +
      `! rtpopusdepay ! opusdec plc=true ! audioconvert ! audioresample ! audio/x-raw,format=S16LE,layout=interleaved,rate=${OPUS_PCM_RATE},channels=${opts.channels ?? 2} ` +
      `! appsink name=sink sync=false max-buffers=50 drop=true`;
    this.#bin = new AppPipeline({
      launch,
      what: 'Opus decoder',
      logger: opts.logger,
      onSample: (buf) => {
        const pcm = new Int16Array(buf.length >> 1);
        Buffer.from(pcm.buffer).set(buf.subarray(0, pcm.length * 2));
        opts.onPcm(pcm);
      },
    });
    opts.logger.debug(`OpusDecoderBin() | started [pt:${opts.payloadType}]`);
  }

  /** Feeds one serialized Opus RTP packet. */
  push(rtp: Uint8Array): void {
    if (this.#bin.closed) throw new InvalidStateError('Opus decoder closed');
    this.#bin.push(rtp);
  }

  close(): void {
    this.#bin.close();
  }
}
