/**
 * A stream's mixed output audio (the soundtrack over the publisher's) → Opus RTP for its WHEP
 * viewers, which otherwise get the publisher's Opus passed through. Runs only while a soundtrack
 * plays and viewers with audio are connected.
 *
 *   appsrc (48 kHz interleaved stereo int16) ! audioconvert ! opusenc frame-size=20
 *     ! rtpopuspay ! appsink
 *
 * The RTP timestamps are rewritten here to count samples (960 a packet, every packet holds 20 ms
 * of the mix, none is skipped): the ones GStreamer derives from the pushes' times jump back and
 * forth by up to 8000 after a stall of the event loop (even with perfect-timestamp), and a viewer's
 * jitter buffer then stretches and cuts the audio. Counted, it plays the packets back to back, as
 * the mix made them.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { AppPipeline } from './AppPipeline.ts';
import { InvalidStateError } from '../errors.ts';
import { OPUS_PCM_RATE } from './OpusDecoderBin.ts';

/**
 * How much earlier than its RTP time a packet's decoded sound was pushed to the encoder, ms: libopus
 * delays its input by its lookahead (312 samples at 48 kHz in opusenc's default audio mode: 2.5 ms
 * of window overlap and 4 ms of delay compensation), and a receiver plays it from the packet's RTP
 * time. The viewers' capture clock takes it off (ViewerAudio); measured at a Chromium viewer, clicks
 * of the mix were heard 7–8 ms after their place without it.
 */
export const OPUS_ENCODER_DELAY_MS = 312 / 48;

/** Samples (per channel, 48 kHz RTP clock) in one packet: opusenc frame-size=20. */
const OPUS_PACKET_SAMPLES = 960;

export interface OpusEncoderBinOptions {
  /** Payload type written (ViewerSet rewrites it to each viewer's anyway). */
  payloadType: number;
  /** Opus bitrate, bit/s. */
  bitrateBps: number;
  /** Largest RTP packet, bytes. */
  mtu: number;
  logger: Logger;
  /** One serialized RTP packet, on the main thread. */
  onRtp: (rtp: Buffer) => void;
}

export class OpusEncoderBin {
  readonly #bin: AppPipeline;

  constructor(opts: OpusEncoderBinOptions) {
    const raw = `audio/x-raw,format=S16LE,layout=interleaved,rate=${OPUS_PCM_RATE},channels=2`;
    const launch =
      `appsrc name=src is-live=true format=time do-timestamp=true leaky-type=downstream max-bytes=400000 caps="${raw}" ! audioconvert ` +
      `! opusenc bitrate=${opts.bitrateBps} frame-size=20 ! rtpopuspay pt=${opts.payloadType} mtu=${opts.mtu} ` +
      `! appsink name=sink sync=false max-buffers=100 drop=true`;
    const base = randomBytes(4).readUInt32BE(0);
    let packets = 0;
    this.#bin = new AppPipeline({
      launch,
      what: 'Opus encoder',
      logger: opts.logger,
      onSample: (buf) => {
        const rtp = Buffer.from(buf);
        if (rtp.length >= 12) rtp.writeUInt32BE((base + OPUS_PACKET_SAMPLES * packets++) >>> 0, 4);
        opts.onRtp(rtp);
      },
    });
    opts.logger.debug(`OpusEncoderBin() | started [pt:${opts.payloadType}]`);
  }

  /** One block of the mix. */
  push(pcm: Uint8Array): void {
    if (this.#bin.closed) throw new InvalidStateError('Opus encoder closed');
    this.#bin.push(pcm);
  }

  get closed(): boolean {
    return this.#bin.closed;
  }

  close(): void {
    this.#bin.close();
  }
}
