/**
 * Typed access to our GStreamer addon (`media/gst/reverie_gst.c`, built by `npm ci`'s install
 * step with node-gyp against Debian's GStreamer dev packages). It is the whole GStreamer surface
 * the media bins use: a `gst-launch` pipeline with `appsrc name=src` and `appsink name=sink`.
 *
 * Samples reach JS through the appsink's `new-sample` callback and a thread-safe function; no
 * libuv threadpool thread ever waits on a pipeline (decision 0006), so the number of streams a
 * process holds does not depend on UV_THREADPOOL_SIZE. Bus errors reach `onError`.
 */
import { createRequire } from 'node:module';

/** An opaque pipeline handle. */
export type GstHandle = { readonly __gst: unique symbol };

interface GstAddon {
  /**
   * Builds the pipeline and sets it PLAYING; throws when it does not build or start. With
   * `borrow`, each Buffer handed to onSamples views the sample's memory and is detached (length 0)
   * when onSamples returns: no copy, no allocation; callers that keep data must copy it. `nice`
   * (Linux) lowers the priority of the pipeline's streaming threads. `pts[i]` is `bufs[i]`'s PTS in
   * ns (-1: none).
   */
  create(launch: string, onSamples: (bufs: Buffer[], pts: number[]) => void, onError: (message: string) => void, borrow?: boolean, nice?: number): GstHandle;
  /**
   * Copies `data` into a new buffer on the appsrc: 0, or -1 once closed or when the appsrc refuses.
   * With `stamp` the buffer's PTS is set now (ns, monotonic, strictly increasing per pipeline) and
   * returned; the sample an encoder makes of it carries the same PTS. With `keyUnit` the encoder
   * makes this very buffer a key unit (a downstream force-key-unit event queued before it).
   */
  push(handle: GstHandle, data: Uint8Array, stamp?: boolean, keyUnit?: boolean): number;
  /** Sends an upstream force-key-unit event from the appsink's sink pad. */
  forceKeyUnit(handle: GstHandle, count: number): boolean;
  /** Sets the `caps` of the named element (appsrc, capsfilter); the pipeline renegotiates on the next buffer. */
  setCaps(handle: GstHandle, element: string, caps: string): void;
  /** NULL state; no callback runs afterwards; the pipeline's GStreamer objects are released now. Idempotent. */
  close(handle: GstHandle): void;
  /** GstPipelines made by `create` that GStreamer has not finalized yet (process-wide; for leak checks). */
  livePipelines(): number;
  /**
   * glibc's `malloc_trim(0)`: pages of every malloc arena that hold only free memory go back to the
   * kernel (not just the top of each heap). True when something was released. Process-wide.
   */
  trimMemory(): boolean;
  /** The GStreamer library version, e.g. `GStreamer 1.22.0`. */
  gstVersion: string;
}

let addon: GstAddon | undefined;

/** Loads the addon once; throws (with cause) if it was not built on this machine. */
export function loadGst(): GstAddon {
  if (!addon) {
    const require = createRequire(import.meta.url);
    try {
      addon = require('./build/Release/reverie_gst.node') as GstAddon;
    } catch (err) {
      throw new Error('the GStreamer addon is not built: install libgstreamer1.0-dev and libgstreamer-plugins-base1.0-dev, then run `npm run build:gst`', { cause: err });
    }
  }
  return addon;
}
