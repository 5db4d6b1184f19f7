/**
 * Typed access to gstreamer-superficial (a NAN addon whose package `main` is a `.node` file, so ESM
 * `import` fails; `createRequire` loads it). Only the surface the media bins use is typed here.
 *
 * Threadpool: every pending `appsink.pull()` holds one libuv threadpool thread until a sample (or
 * EOS/flush) arrives. Each live stream holds two (decoder + encoder appsinks), one more while its
 * AAC encoder runs (RTMP push set, or HLS watched) and one more while its VP8 branch runs (VP8
 * viewers attached), so the process must start with `UV_THREADPOOL_SIZE >= 4 × streams + 4`
 * (file I/O, dns and onnxruntime share the pool).
 * We never call `pollBus()`: its worker blocks forever on an idle bus and cannot be cancelled.
 */
import { createRequire } from 'node:module';

export interface GstAppSink {
  /** Calls back once with the next sample's bytes, or `null` at EOS/flush. Call again to continue. */
  pull(cb: (buf: Buffer | null, caps: Record<string, unknown>) => void): void;
}

export interface GstAppSrc {
  /** Copies `data` into a new GstBuffer; `ptsBe` is an optional 8-byte big-endian PTS in ns. */
  push(data: Uint8Array, ptsBe?: Buffer): void;
}

export interface GstPipeline {
  play(): void;
  pause(): void;
  stop(): void;
  sendEOS(): void;
  /** Sends an upstream GstForceKeyUnit event from the sink pad of the named element. */
  forceKeyUnit(elementName: string, count: number): boolean;
  findChild(name: string): (GstAppSink & GstAppSrc & Record<string, unknown>) | undefined;
}

interface GstModule {
  Pipeline: new (launch: string) => GstPipeline;
}

let gst: GstModule | undefined;

/** Loads the addon once; throws (with cause) if it is not built on this machine. */
export function loadGst(): GstModule {
  if (!gst) {
    const require = createRequire(import.meta.url);
    gst = require('gstreamer-superficial') as GstModule;
  }
  return gst;
}
