/*
 * reverie_gst: the GStreamer surface the media bins need, as a small N-API addon.
 *
 * One object per `gst-launch` description holding `appsrc name=src` and `appsink name=sink`:
 *   create(launch, onSamples, onError, borrow, nice) -> handle   onSamples(buffers, pts)
 *   push(handle, bytes, stamp?, keyUnit?) -> pts   copies bytes into a GstBuffer on the appsrc; with
 *                                        `stamp`, stamps its PTS and returns it (the sample it becomes
 *                                        says it); with `keyUnit`, that very buffer is encoded as a key
 *                                        unit (a downstream GstForceKeyUnit queued in order before it)
 *   forceKeyUnit(handle, count)          upstream GstForceKeyUnit from the appsink's sink pad
 *   setCaps(handle, element, caps)       sets an element's `caps` (appsrc, capsfilter) while playing
 *   close(handle)                        NULL state, callbacks and GStreamer objects released (idempotent)
 *   livePipelines()                      pipelines created here and not yet finalized (leak checks)
 *   trimMemory()                         malloc_trim(0): free pages of every malloc arena back to the kernel
 *
 * Why not gstreamer-superficial: its appsink `pull()` is a libuv threadpool job that blocks in
 * gst_app_sink_pull_sample until a sample exists, so every bin holds a pool thread for its whole
 * life. A few idle bins (a decoder waiting for a keyframe, an AAC encoder without audio) took every
 * thread of the default pool of 4, and everything else that needs the pool stalled with them
 * (WebCrypto for DTLS, fs, dns): streams went OFFLINE while their publishers were sending.
 * See docs/decisions/0006-gstreamer-addon.md.
 *
 * Here nothing blocks a Node thread: the appsink's `new-sample` callback (a GStreamer streaming
 * thread) only schedules one notification on the JS thread (a thread-safe function, coalesced),
 * and the JS thread drains the appsink without waiting (try_pull_sample with timeout 0). The
 * appsink keeps its own bounds and drop policy (max-buffers, drop), exactly as the launch
 * string says. Bus messages are handled synchronously by a sync handler that forwards errors
 * and drops everything else, so nothing accumulates on a bus nobody polls.
 *
 * Ownership: a dropped bus message is ours to unref (GstBusSyncHandler's contract), and each
 * message holds a reference to the element that posted it; missing that unref kept every
 * pipeline, its bus (a GstPoll socket pair) and its children alive for the process's life.
 * close() releases every GStreamer object at once, so a closed stream's decoders, frame pools
 * and sockets go then, not whenever V8 collects the JS handle. The AppBin struct itself is
 * freed when both the JS handle and the thread-safe function are finalized (either can be last).
 */
#define NAPI_VERSION 8
#include <node_api.h>
#include <gst/gst.h>
#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/video/video.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/resource.h>

/* Samples delivered per wake-up before yielding the JS thread (the rest come with the next). */
#define DRAIN_BATCH 32
/*
 * Pushes at least this large (raw video frames) come from a buffer pool: a fresh 786 kB malloc per
 * 512² RGB frame is a fresh mmap whose pages fault in on every fill (p95 1.1 ms per push, measured),
 * a pooled buffer is memory already mapped. RTP and audio packets stay plain allocations.
 */
#define POOL_MIN_BYTES (64 * 1024)
/*
 * Blocks at least this large are mmap'd by glibc and unmapped on free (bytes; glibc's own initial
 * value). Left to itself glibc raises the threshold to the largest block ever freed, after which
 * frame-sized blocks (0.2–0.8 MB) freed by streaming, codec and worker threads stay in those
 * threads' malloc arenas: in a soak with publishers coming and going, arenas grew 150 MiB a
 * minute with no end in sight (V8 heap flat), while a fixed threshold kept the process flat at
 * no measurable CPU cost. Process-wide; an operator's MALLOC_MMAP_THRESHOLD_ takes precedence.
 */
#define MMAP_THRESHOLD_BYTES (128 * 1024)

typedef struct {
  GstElement *pipeline;
  GstElement *src;
  GstElement *sink;
  GstBufferPool *pool; /* JS thread only: for pushes of pool_size bytes */
  gsize pool_size;
  napi_threadsafe_function tsfn;
  napi_ref on_samples;
  napi_ref on_error;
  gint notified; /* atomic: a drain is scheduled on the JS thread */
  gint closed;   /* atomic */
  /*
   * Lend samples instead of copying them: each Buffer views the mapped GstBuffer while
   * onSamples runs and is detached (length 0) when it returns. For large frames that are used
   * and dropped inside the callback (a decoded frame on its way to the encoder), this avoids a
   * 0.4–0.8 MB allocation per frame, whose external-memory pressure drove V8 into frequent
   * full collections.
   */
  gboolean borrow;
  /*
   * Nice value of the pipeline's streaming threads (0: unchanged). Under overload the node's
   * JS thread, which receives every publisher's packets, must win over codecs: a decoder or
   * encoder that falls behind drops frames (latest wins), a JS thread that falls behind loses
   * packets of every stream, and with them their ICE consent.
   */
  int nice;
  /* Owners of this struct (JS thread only): the JS handle's wrap and the thread-safe function. */
  int owners;
  /* The last PTS push(…, stamp) gave, ns (JS thread only): stamps strictly increase per bin. */
  GstClockTime last_pts;
} AppBin;

/*
 * Stamped PTS start here, ns (1000 hours). x264enc asks its base class for a minimum PTS of 1000 h
 * (so B-frame DTS never go negative) and shifts every timestamp below it by the first frame's
 * distance to it, which would make an access unit's PTS differ from its frame's by an offset
 * unknown to the pusher. PTS at or above it are passed through unchanged (checked in
 * test/media/gst/EncoderBin.test.ts).
 */
#define STAMP_BASE_NS ((GstClockTime)1000 * 3600 * GST_SECOND)

/* GstPipelines created by create() and not yet finalized (any thread; atomic). */
static gint live_pipelines = 0;

static void on_pipeline_finalized(gpointer data, GObject *where_the_object_was) {
  (void)data;
  (void)where_the_object_was;
  g_atomic_int_add(&live_pipelines, -1);
}

typedef struct {
  int kind; /* 0 = samples ready, 1 = error message */
  char *message;
} Note;

#define CHECK(env, call)                                                   \
  do {                                                                     \
    if ((call) != napi_ok) {                                               \
      napi_throw_error((env), NULL, "reverie_gst: N-API call failed: " #call); \
      return NULL;                                                         \
    }                                                                      \
  } while (0)

/*
 * Samples lent to JS during the current onSamples call (JS thread only). A push of one of these
 * exact Buffers into another pipeline hands over a reference to the GstBuffer instead of copying
 * it: a decoded frame on its way to the encoder crosses Node without a memcpy.
 */
typedef struct {
  const guint8 *data;
  gsize size;
  GstBuffer *buffer;
} Lent;
static Lent *lending = NULL;
static uint32_t lending_count = 0;

static GstBuffer *lent_buffer(const void *data, size_t size) {
  for (uint32_t i = 0; i < lending_count; i++) {
    if (lending[i].data == data && lending[i].size == size) return lending[i].buffer;
  }
  return NULL;
}

static void notify(AppBin *bin, int kind, char *message) {
  if (g_atomic_int_get(&bin->closed)) {
    g_free(message);
    return;
  }
  Note *note = g_new0(Note, 1);
  note->kind = kind;
  note->message = message;
  if (napi_call_threadsafe_function(bin->tsfn, note, napi_tsfn_nonblocking) != napi_ok) {
    g_free(note->message);
    g_free(note);
    if (kind == 0) g_atomic_int_set(&bin->notified, 0);
  }
}

/* Streaming thread: schedule one drain; samples stay in the appsink (its bounds apply). */
static GstFlowReturn on_new_sample(GstAppSink *sink, gpointer user) {
  (void)sink;
  AppBin *bin = (AppBin *)user;
  if (g_atomic_int_compare_and_exchange(&bin->notified, 0, 1)) notify(bin, 0, NULL);
  return GST_FLOW_OK;
}

/* Any thread that posts: errors go to JS, every message is dropped (no bus queue grows). */
static GstBusSyncReply on_bus_message(GstBus *bus, GstMessage *msg, gpointer user) {
  (void)bus;
  AppBin *bin = (AppBin *)user;
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_STREAM_STATUS && bin->nice != 0) {
    /* Posted synchronously by a streaming thread as it starts: set that thread's priority
     * (on Linux setpriority(PRIO_PROCESS, 0) applies to the calling thread only). */
    GstStreamStatusType type;
    GstElement *owner = NULL;
    gst_message_parse_stream_status(msg, &type, &owner);
    if (type == GST_STREAM_STATUS_TYPE_ENTER) setpriority(PRIO_PROCESS, 0, bin->nice);
  }
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError *err = NULL;
    gchar *debug = NULL;
    gst_message_parse_error(msg, &err, &debug);
    gchar *text = g_strdup_printf("%s: %s", GST_OBJECT_NAME(GST_MESSAGE_SRC(msg)), err ? err->message : "error");
    if (err) g_error_free(err);
    g_free(debug);
    notify(bin, 1, text);
  }
  /* GST_BUS_DROP hands the message back to us: unref it, or it (and its source) lives forever. */
  gst_message_unref(msg);
  return GST_BUS_DROP;
}

/* JS thread: deliver what the appsink holds now, as Buffers, to onSamples(buffers). */
static void call_js(napi_env env, napi_value js_cb, void *context, void *data) {
  (void)js_cb;
  AppBin *bin = (AppBin *)context;
  Note *note = (Note *)data;
  if (env == NULL || g_atomic_int_get(&bin->closed)) {
    /* Tearing down: free what is still queued. */
    if (note) {
      g_free(note->message);
      g_free(note);
    }
    return;
  }
  napi_value undefined, fn;
  napi_get_undefined(env, &undefined);
  if (note->kind == 1) {
    napi_value text;
    napi_create_string_utf8(env, note->message, NAPI_AUTO_LENGTH, &text);
    napi_get_reference_value(env, bin->on_error, &fn);
    napi_call_function(env, undefined, fn, 1, &text, NULL);
    g_free(note->message);
    g_free(note);
    return;
  }
  g_free(note);
  /* Reset first: a sample that lands while we drain schedules the next drain. */
  g_atomic_int_set(&bin->notified, 0);
  napi_value list, pts_list;
  napi_create_array(env, &list);
  napi_create_array(env, &pts_list);
  uint32_t n = 0;
  /* Lent samples stay mapped until the callback returns. */
  GstSample *lent[DRAIN_BATCH];
  GstMapInfo maps[DRAIN_BATCH];
  napi_value views[DRAIN_BATCH];
  Lent table[DRAIN_BATCH];
  uint32_t nlent = 0;
  while (n < DRAIN_BATCH) {
    GstSample *sample = gst_app_sink_try_pull_sample(GST_APP_SINK(bin->sink), 0);
    if (!sample) break;
    GstBuffer *buffer = gst_sample_get_buffer(sample);
    GstMapInfo map;
    if (!buffer || !gst_buffer_map(buffer, &map, GST_MAP_READ)) {
      gst_sample_unref(sample);
      continue;
    }
    napi_value buf, pts;
    /* The buffer's PTS in ns (-1: none), so an owner that stamped its pushes knows which this is. */
    napi_create_double(env, GST_BUFFER_PTS_IS_VALID(buffer) ? (double)GST_BUFFER_PTS(buffer) : -1.0, &pts);
    napi_set_element(env, pts_list, n, pts);
    if (bin->borrow && map.size > 0 && napi_create_external_buffer(env, map.size, map.data, NULL, NULL, &buf) == napi_ok) {
      lent[nlent] = sample;
      maps[nlent] = map;
      table[nlent] = (Lent){map.data, map.size, buffer};
      views[nlent++] = buf;
      napi_set_element(env, list, n++, buf);
      continue;
    }
    void *copy = NULL;
    if (napi_create_buffer_copy(env, map.size, map.data, &copy, &buf) == napi_ok) napi_set_element(env, list, n++, buf);
    gst_buffer_unmap(buffer, &map);
    gst_sample_unref(sample);
  }
  if (n == DRAIN_BATCH && g_atomic_int_compare_and_exchange(&bin->notified, 0, 1)) notify(bin, 0, NULL);
  if (n > 0) {
    Lent *outer = lending;
    uint32_t outer_count = lending_count;
    lending = table;
    lending_count = nlent;
    napi_value args[2] = {list, pts_list};
    napi_get_reference_value(env, bin->on_samples, &fn);
    napi_call_function(env, undefined, fn, 2, args, NULL);
    lending = outer;
    lending_count = outer_count;
  }
  for (uint32_t i = 0; i < nlent; i++) {
    /* Whatever JS kept now sees an empty buffer, never freed memory. */
    napi_value arraybuffer;
    if (napi_get_typedarray_info(env, views[i], NULL, NULL, NULL, &arraybuffer, NULL) == napi_ok) napi_detach_arraybuffer(env, arraybuffer);
    gst_buffer_unmap(gst_sample_get_buffer(lent[i]), &maps[i]);
    gst_sample_unref(lent[i]);
  }
}

static void drop_pool(AppBin *bin) {
  if (!bin->pool) return;
  gst_buffer_pool_set_active(bin->pool, FALSE);
  gst_object_unref(bin->pool);
  bin->pool = NULL;
  bin->pool_size = 0;
}

static void disown(AppBin *bin) {
  if (--bin->owners == 0) g_free(bin);
}

/* JS thread. Everything below checks `closed` before touching the pointers released here. */
static void stop(napi_env env, AppBin *bin) {
  if (!g_atomic_int_compare_and_exchange(&bin->closed, 0, 1)) return;
  /* NULL state joins the streaming threads: no callback runs after this returns. */
  gst_element_set_state(bin->pipeline, GST_STATE_NULL);
  GstBus *bus = gst_element_get_bus(bin->pipeline);
  if (bus) {
    gst_bus_set_sync_handler(bus, NULL, NULL, NULL);
    gst_object_unref(bus);
  }
  napi_release_threadsafe_function(bin->tsfn, napi_tsfn_abort);
  if (env) {
    napi_delete_reference(env, bin->on_samples);
    napi_delete_reference(env, bin->on_error);
  }
  drop_pool(bin);
  gst_object_unref(bin->src);
  gst_object_unref(bin->sink);
  gst_object_unref(bin->pipeline);
  bin->src = bin->sink = bin->pipeline = NULL;
}

/* A buffer of `size` bytes: pooled for frames (one pool per size, rebuilt when the size changes). */
static GstBuffer *new_buffer(AppBin *bin, gsize size) {
  if (size < POOL_MIN_BYTES) return gst_buffer_new_allocate(NULL, size, NULL);
  if (bin->pool_size != size) {
    drop_pool(bin);
    GstBufferPool *pool = gst_buffer_pool_new();
    GstStructure *config = gst_buffer_pool_get_config(pool);
    gst_buffer_pool_config_set_params(config, NULL, (guint)size, 2, 0);
    if (!gst_buffer_pool_set_config(pool, config) || !gst_buffer_pool_set_active(pool, TRUE)) {
      gst_object_unref(pool);
      return gst_buffer_new_allocate(NULL, size, NULL);
    }
    bin->pool = pool;
    bin->pool_size = size;
  }
  GstBuffer *buffer = NULL;
  if (gst_buffer_pool_acquire_buffer(bin->pool, &buffer, NULL) != GST_FLOW_OK || !buffer) return gst_buffer_new_allocate(NULL, size, NULL);
  return buffer;
}

/* The JS handle was collected (or the env is torn down): a handle never closed stops here. */
static void finalize_bin(napi_env env, void *data, void *hint) {
  (void)hint;
  AppBin *bin = (AppBin *)data;
  stop(env, bin);
  disown(bin);
}

/* The thread-safe function is gone: no call_js can run for this bin any more. */
static void finalize_tsfn(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  disown((AppBin *)data);
}

static AppBin *unwrap(napi_env env, napi_value value) {
  AppBin *bin = NULL;
  if (napi_unwrap(env, value, (void **)&bin) != napi_ok || bin == NULL) {
    napi_throw_type_error(env, NULL, "reverie_gst: not a pipeline handle");
    return NULL;
  }
  return bin;
}

/* create(launch, onSamples: (bufs: Buffer[]) => void, onError: (msg: string) => void, borrow?: boolean, nice?: number) */
static napi_value create(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  size_t len = 0;
  if (argc < 3 || napi_get_value_string_utf8(env, argv[0], NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "reverie_gst: create(launch, onSamples, onError)");
    return NULL;
  }
  char *launch = g_malloc(len + 1);
  napi_get_value_string_utf8(env, argv[0], launch, len + 1, &len);
  GError *err = NULL;
  GstElement *pipeline = gst_parse_launch(launch, &err);
  g_free(launch);
  if (!pipeline || err) {
    gchar *text = g_strdup_printf("pipeline does not build: %s", err ? err->message : "unknown error");
    if (err) g_error_free(err);
    if (pipeline) gst_object_unref(pipeline);
    napi_throw_error(env, NULL, text);
    g_free(text);
    return NULL;
  }
  GstElement *src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  GstElement *sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
  if (!src || !sink || !GST_IS_APP_SRC(src) || !GST_IS_APP_SINK(sink)) {
    if (src) gst_object_unref(src);
    if (sink) gst_object_unref(sink);
    gst_object_unref(pipeline);
    napi_throw_error(env, NULL, "pipeline lacks appsrc name=src or appsink name=sink");
    return NULL;
  }
  g_atomic_int_add(&live_pipelines, 1);
  g_object_weak_ref(G_OBJECT(pipeline), on_pipeline_finalized, NULL);
  AppBin *bin = g_new0(AppBin, 1);
  bin->owners = 2;
  bin->last_pts = GST_CLOCK_TIME_NONE;
  bin->pipeline = pipeline;
  bin->src = src;
  bin->sink = sink;
  bool borrow = false;
  if (argc >= 4) napi_get_value_bool(env, argv[3], &borrow);
  bin->borrow = borrow;
  int32_t nice = 0;
  if (argc >= 5) napi_get_value_int32(env, argv[4], &nice);
  bin->nice = nice < -20 ? -20 : nice > 19 ? 19 : nice;
  napi_value resource_name, handle;
  CHECK(env, napi_create_string_utf8(env, "reverie_gst", NAPI_AUTO_LENGTH, &resource_name));
  CHECK(env, napi_create_reference(env, argv[1], 1, &bin->on_samples));
  CHECK(env, napi_create_reference(env, argv[2], 1, &bin->on_error));
  CHECK(env, napi_create_threadsafe_function(env, NULL, NULL, resource_name, 0, 1, bin, finalize_tsfn, bin, call_js, &bin->tsfn));
  CHECK(env, napi_create_object(env, &handle));
  CHECK(env, napi_wrap(env, handle, bin, finalize_bin, NULL, NULL));

  GstAppSinkCallbacks callbacks;
  memset(&callbacks, 0, sizeof callbacks);
  callbacks.new_sample = on_new_sample;
  gst_app_sink_set_callbacks(GST_APP_SINK(sink), &callbacks, bin, NULL);
  GstBus *bus = gst_element_get_bus(pipeline);
  gst_bus_set_sync_handler(bus, on_bus_message, bin, NULL);
  gst_object_unref(bus);
  if (gst_element_set_state(pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    stop(env, bin);
    napi_throw_error(env, NULL, "pipeline does not start (state change to PLAYING failed)");
    return NULL;
  }
  return handle;
}

/*
 * push(handle, bytes: Uint8Array, stamp?: boolean): number — 0 when pushed, -1 once closed or
 * when the appsrc refuses. With `stamp` the buffer gets a PTS here (ns on the monotonic clock,
 * strictly increasing per bin; do-timestamp only fills a PTS that is not set) and the call
 * returns it: an encoder carries each frame's PTS to the access unit it becomes, so the owner
 * knows exactly which push each sample encodes, whatever a leaky queue or the encoder dropped.
 */
static napi_value push(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], result;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  AppBin *bin = unwrap(env, argv[0]);
  if (!bin) return NULL;
  void *data = NULL;
  size_t length = 0;
  napi_typedarray_type type;
  napi_value arraybuffer;
  size_t offset;
  if (napi_get_typedarray_info(env, argv[1], &type, &length, &data, &arraybuffer, &offset) != napi_ok || type != napi_uint8_array) {
    napi_throw_type_error(env, NULL, "reverie_gst: push needs a Uint8Array");
    return NULL;
  }
  bool stamp = false;
  if (argc >= 3) napi_get_value_bool(env, argv[2], &stamp);
  bool key_unit = false;
  if (argc >= 4) napi_get_value_bool(env, argv[3], &key_unit);
  double out = -1.0;
  if (!g_atomic_int_get(&bin->closed)) {
    GstBuffer *buffer = lent_buffer(data, length);
    if (buffer) {
      /* A sample lent right now by another pipeline: a new buffer sharing its memory, no memcpy. */
      buffer = gst_buffer_copy(buffer);
      GST_BUFFER_PTS(buffer) = GST_CLOCK_TIME_NONE;
      GST_BUFFER_DTS(buffer) = GST_CLOCK_TIME_NONE;
      GST_BUFFER_DURATION(buffer) = GST_CLOCK_TIME_NONE;
    } else {
      buffer = new_buffer(bin, length);
      gst_buffer_fill(buffer, 0, data, length);
    }
    GstClockTime pts = GST_CLOCK_TIME_NONE;
    if (stamp) {
      pts = STAMP_BASE_NS + (GstClockTime)g_get_monotonic_time() * GST_USECOND;
      /* Whole µs: JS reads them as doubles, exact for multiples of 8 ns up to 2^56 ns (834 days). */
      if (bin->last_pts != GST_CLOCK_TIME_NONE && pts <= bin->last_pts) pts = bin->last_pts + GST_USECOND;
      bin->last_pts = pts;
      GST_BUFFER_PTS(buffer) = pts;
    }
    /* appsrc queues serialized events in order with its buffers (GStreamer >= 1.18), so the encoder
     * sees the request right before this buffer: the key unit lands on this frame, not a later one
     * (a rendition mirrors the main encoder's key frames exactly, so their segments align). If the
     * leaky appsrc drops this buffer, the request applies to the next one. */
    if (key_unit) gst_element_send_event(bin->src, gst_video_event_new_downstream_force_key_unit(GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE, TRUE, 0));
    if (gst_app_src_push_buffer(GST_APP_SRC(bin->src), buffer) == GST_FLOW_OK) out = stamp ? (double)pts : 0.0;
  }
  CHECK(env, napi_create_double(env, out, &result));
  return result;
}

/* forceKeyUnit(handle, count): asks the encoder upstream of the appsink for a key unit. */
static napi_value force_key_unit(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], result;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  AppBin *bin = unwrap(env, argv[0]);
  if (!bin) return NULL;
  uint32_t count = 0;
  napi_get_value_uint32(env, argv[1], &count);
  gboolean sent = FALSE;
  if (!g_atomic_int_get(&bin->closed)) {
    GstPad *pad = gst_element_get_static_pad(bin->sink, "sink");
    if (pad) {
      sent = gst_pad_push_event(pad, gst_video_event_new_upstream_force_key_unit(GST_CLOCK_TIME_NONE, TRUE, count));
      gst_object_unref(pad);
    }
  }
  CHECK(env, napi_get_boolean(env, sent, &result));
  return result;
}

/*
 * setCaps(handle, elementName, caps): the element's `caps` property, e.g. a capsfilter's or the
 * appsrc's. The pipeline renegotiates on the next buffer without restarting (a decoder keeps its
 * reference frames, so no key frame is needed). Throws on unknown elements or unparsable caps.
 */
static napi_value set_caps(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  AppBin *bin = unwrap(env, argv[0]);
  if (!bin) return NULL;
  char name[64], text[1024];
  size_t len;
  if (napi_get_value_string_utf8(env, argv[1], name, sizeof name, &len) != napi_ok || napi_get_value_string_utf8(env, argv[2], text, sizeof text, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "reverie_gst: setCaps(handle, element, caps)");
    return NULL;
  }
  if (g_atomic_int_get(&bin->closed)) return NULL;
  GstElement *element = gst_bin_get_by_name(GST_BIN(bin->pipeline), name);
  if (!element || !g_object_class_find_property(G_OBJECT_GET_CLASS(element), "caps")) {
    if (element) gst_object_unref(element);
    napi_throw_error(env, NULL, "reverie_gst: no element with caps of that name");
    return NULL;
  }
  GstCaps *caps = gst_caps_from_string(text);
  if (!caps) {
    gst_object_unref(element);
    napi_throw_error(env, NULL, "reverie_gst: caps do not parse");
    return NULL;
  }
  g_object_set(element, "caps", caps, NULL);
  gst_caps_unref(caps);
  gst_object_unref(element);
  return NULL;
}

/* close(handle): NULL state; no callback runs afterwards. Idempotent. */
static napi_value close_bin(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  AppBin *bin = unwrap(env, argv[0]);
  if (!bin) return NULL;
  stop(env, bin);
  return NULL;
}

/* livePipelines(): GstPipelines made by create() that GStreamer has not finalized yet. */
static napi_value live_pipelines_count(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  CHECK(env, napi_create_int32(env, g_atomic_int_get(&live_pipelines), &result));
  return result;
}

/*
 * trimMemory(): boolean — glibc's malloc_trim(0): in every arena, pages that hold only free chunks
 * go back to the kernel (MADV_DONTNEED), not just the top of the heap. Without it a freed block
 * in the middle of a heap stays resident for as long as any block above it lives: after streams
 * come and go, the process keeps what its busiest minute needed. True when memory was released;
 * false where there is nothing to trim (or no glibc).
 */
static napi_value trim_memory(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
#ifdef __GLIBC__
  int released = malloc_trim(0);
#else
  int released = 0;
#endif
  CHECK(env, napi_get_boolean(env, released != 0, &result));
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
#ifdef __GLIBC__
  if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL) mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
#endif
  gst_init(NULL, NULL);
  napi_property_descriptor props[] = {
    {"create", NULL, create, NULL, NULL, NULL, napi_default, NULL},
    {"push", NULL, push, NULL, NULL, NULL, napi_default, NULL},
    {"forceKeyUnit", NULL, force_key_unit, NULL, NULL, NULL, napi_default, NULL},
    {"setCaps", NULL, set_caps, NULL, NULL, NULL, napi_default, NULL},
    {"close", NULL, close_bin, NULL, NULL, NULL, napi_default, NULL},
    {"livePipelines", NULL, live_pipelines_count, NULL, NULL, NULL, napi_default, NULL},
    {"trimMemory", NULL, trim_memory, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_value version;
  CHECK(env, napi_define_properties(env, exports, sizeof props / sizeof props[0], props));
  gchar *v = gst_version_string();
  napi_create_string_utf8(env, v, NAPI_AUTO_LENGTH, &version);
  g_free(v);
  napi_set_named_property(env, exports, "gstVersion", version);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
