/**
 * The VP8 encoder of a stream, for viewers whose WebRTC stack has no H.264 (libwebrtc builds
 * without proprietary codecs, such as @roamhq/wrtc). It is fed the same processed frames as the
 * x264 EncoderBin and runs only while the stream has VP8 viewers (LiveStream starts and stops it).
 *
 *   appsrc (RGB W×H, leaky, 2 buffers) ! videoconvert ! I420 ! vp8enc deadline=1 (realtime)
 *     cpu-used=N lag-in-frames=0 error-resilient keyframe-max-dist=K end-usage=cbr threads=1
 *     ! video/x-vp8 ! appsink
 *
 * lag-in-frames=0 keeps it 1-in-1-out (no alt-ref look-ahead); error-resilient lets a decoder
 * resume after a lost frame without waiting for the next key frame; one thread bounds its cost to
 * one core. The frame appsink does not drop (a dropped frame corrupts the references): if Node
 * stops pulling, vp8enc blocks and the leaky appsrc drops the oldest raw frames instead.
 */
import { VideoEncoderBin, type VideoEncoderBinOptions } from './VideoEncoderBin.ts';
import { isVp8Keyframe } from '../VideoCodec.ts';

export interface EncodedVp8Frame {
  /** One VP8 frame (RFC 6386), as RFC 7741 packetizes it. */
  data: Uint8Array;
  keyframe: boolean;
  /** performance.now() when the frame reached Node. */
  atMs: number;
  /** ms from the frame push to this output (valid while the encoder is 1-in-1-out). */
  encodeMs: number;
  /** Its time on the stream's output timeline, ms (see EncodedAccessUnit.ptsMs). */
  ptsMs: number;
}

export interface Vp8EncoderBinOptions extends VideoEncoderBinOptions {
  bitrateKbps: number;
  keyIntFrames: number;
  /** libvpx speed: higher is cheaper and worse (-16…16; positive lets libvpx speed up further under load). */
  cpuUsed: number;
  onFrame: (frame: EncodedVp8Frame) => void;
}

export class Vp8EncoderBin extends VideoEncoderBin {
  framesOut = 0;

  constructor(opts: Vp8EncoderBinOptions) {
    super(
      opts,
      'VP8 encoder',
      `vp8enc deadline=1 cpu-used=${opts.cpuUsed} lag-in-frames=0 error-resilient=default keyframe-mode=auto ` +
        `keyframe-max-dist=${opts.keyIntFrames} end-usage=cbr target-bitrate=${opts.bitrateKbps * 1000} threads=1 ! video/x-vp8`,
      (buf, atMs, encodeMs, _pts, ptsMs) => {
        this.framesOut++;
        opts.onFrame({ data: buf, keyframe: isVp8Keyframe(buf), atMs, encodeMs, ptsMs });
      },
    );
  }
}
