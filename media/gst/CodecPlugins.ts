/**
 * The GStreamer plugins of the codecs the node runs, loaded once per process when a node starts.
 *
 * GStreamer loads a plugin's library the first time one of its elements is made, on the thread
 * that makes it, and the bins are made on the JS thread. Left to the first stream, the first
 * publisher's decoder (libav's avdec_h264: 0.2–0.4 s to load on an idle machine, 0.8 s measured
 * on a loaded one) held the JS thread that long: every stream of the node stopped, and a viewer
 * that waited on the slate saw it freeze for that long at the switch to live (the slate's ticks
 * run on the same thread). Loading them here, before any stream exists, costs that once at start;
 * later decoders are built in ≈ 15 ms (docs/performance.md, "The switch from slate to live").
 */
import type { Logger } from 'pino';
import { loadGst } from './gst.ts';

/**
 * One element of each plugin the bins use beyond core and base (whose libraries the first
 * pipeline loads anyway): DecoderBin, EncoderBin, Vp8EncoderBin, AacEncoderBin.
 */
const CODEC_ELEMENTS = ['h264parse', 'avdec_h264', 'vp8dec', 'x264enc', 'vp8enc', 'rtpopusdepay', 'opusdec', 'aacparse'] as const;

let loaded = false;

/**
 * Makes (and at once closes) one pipeline per codec element, so that its plugin is loaded from now
 * on (GStreamer never unloads one). Once per process; an element that is not installed is logged
 * and left to fail where a bin needs it. Returns the ms it took (0 when already done).
 */
export function loadCodecPlugins(logger: Logger): number {
  if (loaded) return 0;
  loaded = true;
  const gst = loadGst();
  const t0 = performance.now();
  for (const element of CODEC_ELEMENTS) {
    try {
      // appsrc's pad takes any caps, so this links without a format; nothing flows before close.
      gst.close(gst.create(`appsrc name=src ! ${element} ! appsink name=sink`, () => undefined, () => undefined));
    } catch (err) {
      logger.warn({ err }, `loadCodecPlugins() | element not available, left to the bin that needs it [element:${element}]`);
    }
  }
  const ms = performance.now() - t0;
  logger.info(`loadCodecPlugins() | codec plugins loaded [ms:${Math.round(ms)}]`);
  return ms;
}
