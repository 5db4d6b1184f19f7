/**
 * The one H.264 encoder of a stream; its access units feed every H.264 viewer, LL-HLS and RTMP.
 *
 *   appsrc (RGB W×H, leaky, 2 buffers) ! videoconvert ! I420 ! x264enc tune=zerolatency
 *     speed-preset=ultrafast bframes=0 key-int-max=N ! video/x-h264,profile=constrained-baseline
 *     ! h264parse config-interval=-1 ! byte-stream/au ! appsink
 *
 * Constrained baseline is what every WebRTC H.264 decoder takes (42e01f). h264parse repeats
 * SPS/PPS before every IDR so a viewer that starts on any keyframe can decode. The AU appsink does
 * not drop (a dropped AU corrupts the GOP): if Node stops pulling, x264enc blocks and the leaky
 * appsrc drops the oldest raw frames instead, so the bound is 2 raw frames + the appsink's 8 AUs.
 */
import { isH264Keyframe, splitAnnexB } from '../H264Nal.ts';
import { VideoEncoderBin, type VideoEncoderBinOptions } from './VideoEncoderBin.ts';

export interface EncodedAccessUnit {
  nals: Uint8Array[];
  keyframe: boolean;
  /** performance.now() when the AU reached Node. */
  atMs: number;
  /** ms from its frame's push to this AU (-1: unknown). */
  encodeMs: number;
  /** Which frame this is: the number `EncoderBin.push` returned for it (its PTS, ns; -1: unknown). */
  pts: number;
  /**
   * Its time on the stream's output timeline, ms on the node's monotonic clock (OutputClock: the
   * capture time of a live frame): what every output stamps it with.
   */
  ptsMs: number;
}

export interface EncoderBinOptions extends VideoEncoderBinOptions {
  bitrateKbps: number;
  /** Longest GOP, frames. */
  keyIntFrames: number;
  /**
   * Key frames only where the caller asks for one (`push(…, keyUnit)`), none of x264's own (no
   * scene cuts; `keyIntFrames` only as a backstop): a rendition mirrors the stream's encoder.
   */
  keyFramesOnRequest?: boolean;
  onAccessUnit: (au: EncodedAccessUnit) => void;
}

export class EncoderBin extends VideoEncoderBin {
  accessUnitsOut = 0;

  constructor(opts: EncoderBinOptions) {
    super(
      opts,
      'encoder',
      `x264enc name=enc tune=zerolatency speed-preset=ultrafast threads=1 bframes=0 key-int-max=${opts.keyIntFrames} bitrate=${opts.bitrateKbps} ` +
        (opts.keyFramesOnRequest ? 'option-string="scenecut=0" ' : '') +
        `! video/x-h264,profile=constrained-baseline ! h264parse config-interval=-1 ! video/x-h264,stream-format=byte-stream,alignment=au`,
      (buf, atMs, encodeMs, pts, ptsMs) => {
        const nals = splitAnnexB(buf);
        this.accessUnitsOut++;
        opts.onAccessUnit({ nals, keyframe: isH264Keyframe(nals), atMs, encodeMs, pts, ptsMs });
      },
    );
  }
}
