/**
 * The media node's live numbers on /metrics, read at scrape time from each stream (no timers of
 * our own). Names follow Prometheus' conventions: base units (seconds, bytes), `_total` on
 * counters, histograms rather than precomputed quantiles (so Prometheus can aggregate across
 * streams and nodes). Labels carry the stream id; a node holds few streams, so cardinality stays
 * bounded by its capacity. A stream's series end with the stream; Prometheus treats a later
 * stream's fresh counters as new series, not as resets.
 */
import type { Counter, Gauge } from 'prom-client';
import { HlsOutput, STAGE_BUCKETS_S, WhepOutput, type LiveStream, type MediaNode, type WhepOutputStats } from '../media/index.ts';
import type { CollectedMetric, Metrics } from './Metrics.ts';

const STAGES = ['decode', 'process', 'encode', 'node'] as const;

/** The fields of native's FramePipelineStatus read here (the media status carries it untyped). */
interface EngineStatus {
  demo?: boolean;
  stageMs?: Record<string, number>;
  preprocessors?: { preprocessor: string; controlnet: string; demo: boolean; providers: string[] }[];
}

export function registerMediaMetrics(metrics: Metrics, node: MediaNode): void {
  const gauge = <L extends string>(name: string, help: string, labels: readonly L[], fill: (set: (l: Record<L, string>, v: number) => void) => void) =>
    metrics.gauge(name, help, labels, (g: Gauge<L>) => {
      g.reset();
      fill((l, v) => g.set(l, v));
    });
  // A counter whose value is a running total kept elsewhere (the stream's own counts), copied in at scrape.
  const total = (name: string, help: string, value: (s: LiveStream) => number | undefined) =>
    metrics.counter(name, help, ['stream_id'], (c: Counter<'stream_id'>) => {
      c.reset();
      for (const stream of node.streams()) {
        const v = value(stream);
        if (v !== undefined && Number.isFinite(v) && v >= 0) c.inc({ stream_id: stream.streamId }, v);
      }
    });
  const perStream = (name: string, help: string, value: (s: ReturnType<LiveStream['status']>) => number | undefined) =>
    gauge(name, help, ['stream_id'], (set) => {
      for (const stream of node.streams()) {
        const v = value(stream.status());
        if (v !== undefined && Number.isFinite(v)) set({ stream_id: stream.streamId }, v);
      }
    });

  gauge('reverie_media_streams', 'Streams held by this media node.', [], (set) => set({}, node.streamCount));
  // Process-wide counts of the node's malloc trims (media/gst/MemoryTrim.ts).
  const trimTotal = (name: string, help: string, value: () => number) =>
    metrics.counter(name, help, [], (c: Counter) => {
      c.reset();
      c.inc(value());
    });
  trimTotal('reverie_media_memory_trims_total', 'Times freed malloc memory was handed back to the kernel (after stream closes and on a timer).', () => node.memoryTrim.trims);
  trimTotal('reverie_media_memory_trim_released_bytes_total', 'Resident bytes those trims gave back.', () => node.memoryTrim.releasedBytes);
  trimTotal('reverie_media_memory_trim_seconds_total', 'Time spent trimming, seconds.', () => node.memoryTrim.seconds);
  perStream('reverie_media_input_fps', 'Frames per second received from the publisher over the last second.', (s) => s.inputFps);
  perStream('reverie_media_output_fps', 'Frames per second encoded for viewers over the last second.', (s) => s.outputFps);
  // Every reader of every stream (WHEP, LL-HLS, RTMP, and any other output): a new output shows up here as it is.
  gauge('reverie_media_reader_consumers', 'Consumers of each reader of the stream (viewers, LL-HLS players of the last 30 s, RTMP pushes, a recording).', ['stream_id', 'reader', 'kind'], (set) => {
    for (const stream of node.streams()) {
      for (const [reader, r] of Object.entries(stream.status().readers)) set({ stream_id: stream.streamId, reader, kind: r.kind }, r.consumers);
    }
  });
  const whep = (fill: (stream: LiveStream, w: WhepOutputStats) => void) => {
    for (const stream of node.streams()) {
      const w = stream.readers.find(WhepOutput)?.stats();
      if (w) fill(stream, w);
    }
  };
  gauge('reverie_media_viewers', 'WHEP viewers of the stream.', ['stream_id'], (set) => whep((s, w) => set({ stream_id: s.streamId }, w.viewers)));
  // Origin and edge alike (decision 0030): summed over every node's /metrics, a stream's audience across the cluster.
  gauge('reverie_media_audience', "Connected WHEP viewers this node carries of the stream, as its origin or as an edge relaying it (edges' pulls counted apart).", ['stream_id', 'role', 'kind'], (set) => {
    for (const [streamId, a] of Object.entries(node.audience())) {
      set({ stream_id: streamId, role: a.role, kind: 'viewer' }, a.viewers - a.edges);
      if (a.role === 'origin') set({ stream_id: streamId, role: a.role, kind: 'edge_pull' }, a.edges);
    }
  });
  gauge('reverie_media_viewers_by_codec', 'WHEP viewers of the stream by the video codec they are sent.', ['stream_id', 'codec'], (set) =>
    whep((s, w) => {
      for (const [codec, n] of Object.entries(w.viewersByCodec)) set({ stream_id: s.streamId, codec }, n);
    }),
  );
  // Renditions (decision 0031): where each viewer's link put it, and what its link is estimated to carry.
  gauge('reverie_media_viewers_by_rendition', 'H.264 WHEP viewers of the stream by the rendition they are sent (full = the full encode).', ['stream_id', 'rendition'], (set) =>
    whep((s, w) => {
      for (const [rendition, n] of Object.entries(w.viewersByRendition)) set({ stream_id: s.streamId, rendition }, n);
    }),
  );
  gauge('reverie_media_viewer_estimate_bits_per_second', "Each adaptive WHEP viewer's receive-side bandwidth estimate (REMB), bit/s (the first 50 viewers of a stream).", ['stream_id', 'session_id', 'rendition'], (set) =>
    whep((s, w) => {
      for (const b of w.bandwidth) if (b.estimateBps !== null) set({ stream_id: s.streamId, session_id: b.sessionId, rendition: b.rendition || 'full' }, b.estimateBps);
    }),
  );
  gauge('reverie_media_renditions_running', 'Rendition encoders running for the stream (RENDITIONS; they run while an LL-HLS player, a WHEP viewer or an RTMP push may need them).', ['stream_id'], (set) => {
    for (const stream of node.streams()) set({ stream_id: stream.streamId }, stream.status().renditions.filter((r) => r.running).length);
  });
  gauge('reverie_media_viewer_audio_hold_seconds', "How long WHEP viewers' sound waits at the node for the picture of its moment (the picture's delay from capture), seconds.", ['stream_id'], (set) =>
    whep((s, w) => set({ stream_id: s.streamId }, w.viewerAudioHoldMs / 1000)),
  );
  gauge('reverie_media_vp8_branch_running', 'The VP8 output branch (for viewers without H.264) is encoding: 1 or 0.', ['stream_id'], (set) => whep((s, w) => set({ stream_id: s.streamId }, w.vp8.running ? 1 : 0)));
  total('reverie_media_input_frames_total', 'Whole frames received from the publisher.', (s) => s.status().framesIn);
  total('reverie_media_output_frames_total', 'Frames encoded for viewers.', (s) => s.status().framesOut);
  total('reverie_media_dropped_frames_total', 'Decoded frames dropped because a later stage was busy (latest frame wins).', (s) => s.status().framesDropped);
  // A stall of the output shows to LL-HLS players as media time cut out (the timeline has no holes): how often, and how much.
  const hls = (s: LiveStream) => s.readers.find(HlsOutput)?.packager.stats();
  total('reverie_media_hls_cuts_total', 'Pauses cut out of the LL-HLS media timeline (output stalls longer than a part, the publisher away, a new encoder size).', (s) => hls(s)?.cuts);
  total('reverie_media_hls_cut_seconds_total', 'Media time those cuts took out of the LL-HLS timeline (video and audio alike), seconds.', (s) => hls(s)?.cutSeconds);
  total('reverie_media_hls_audio_frames_silent_total', 'AAC frames of silence the LL-HLS packager put where no audio came (no publisher audio, or audio over 150 ms late).', (s) => hls(s)?.audioFramesSilent);
  total('reverie_media_hls_audio_frames_dropped_total', 'AAC frames the LL-HLS packager dropped because they came over 200 ms ahead of the video (after a cut or a burst).', (s) => hls(s)?.audioFramesDropped);
  total('reverie_media_hls_audio_resyncs_total', 'Times the LL-HLS packager placed the audio again after it came over 200 ms early for a second (its clock and the video timeline disagreed).', (s) => hls(s)?.audioResyncs);
  total('reverie_media_ingest_packets_lost_total', "Video RTP packets the publisher's link lost (gaps past the reorder window, before NACK repair).", (s) => s.status().ingest?.packetsLost);
  total('reverie_media_ingest_packets_unrecovered_total', 'Video RTP packets no retransmission brought back in time (the frames after them waited for a key frame).', (s) => s.status().ingest?.packetsUnrecovered);
  total('reverie_media_ingest_nack_requests_total', 'Sequence numbers the node asked the publisher to send again (one per number per NACK).', (s) => s.status().ingest?.nackRequests);
  total('reverie_media_ingest_received_bytes_total', 'Bytes received from the publisher (SRTP on the wire).', (s) => s.status().ingest?.bytesReceived);
  total('reverie_media_ingest_sent_bytes_total', 'Bytes sent to the publisher (SRTCP feedback on the wire).', (s) => s.status().ingest?.bytesSent);

  // The engine's own status (native FramePipeline.status()), when the stream runs one.
  const engine = (s: NonNullable<ReturnType<MediaNode['status']>>) => s.pipeline as EngineStatus | null;
  perStream('reverie_media_pipeline_demo', 'The stream runs a tiny random-weight DEMO base model: 1 or 0.', (s) => (engine(s) ? (engine(s)?.demo ? 1 : 0) : undefined));
  gauge('reverie_media_pipeline_stage_seconds', 'Per-stage time of the last frame inside the diffusion pipeline, seconds (control = ControlNet preprocessors).', ['stream_id', 'stage'], (set) => {
    for (const stream of node.streams()) {
      const ms = engine(stream.status())?.stageMs;
      if (!ms) continue;
      for (const [stage, v] of Object.entries(ms)) if (typeof v === 'number' && Number.isFinite(v)) set({ stream_id: stream.streamId, stage }, v / 1000);
    }
  });
  gauge(
    'reverie_media_controlnet_preprocessor',
    'Model-backed ControlNet preprocessors loaded (1 each), with the provider they run on and whether the model is a DEMO.',
    ['stream_id', 'preprocessor', 'controlnet', 'provider', 'demo'],
    (set) => {
      for (const stream of node.streams()) {
        for (const p of engine(stream.status())?.preprocessors ?? []) {
          set({ stream_id: stream.streamId, preprocessor: p.preprocessor, controlnet: p.controlnet, provider: p.providers.join(','), demo: p.demo ? 'true' : 'false' }, 1);
        }
      }
    },
  );

  metrics.collector(stageHistogram(node));
}

/**
 * `reverie_media_stage_duration_seconds{stream_id,stage}`: each stream's cumulative per-stage
 * histograms (media/StageTimer), written out in Prometheus' histogram form at scrape.
 */
function stageHistogram(node: MediaNode): { name: string; get(): CollectedMetric } {
  const name = 'reverie_media_stage_duration_seconds';
  return {
    name,
    get() {
      const values: CollectedMetric['values'] = [];
      for (const stream of node.streams()) {
        const totals = stream.latencyTotals();
        for (const stage of STAGES) {
          const t = totals[stage];
          if (t.count === 0) continue;
          const labels = { stream_id: stream.streamId, stage };
          let cumulative = 0;
          STAGE_BUCKETS_S.forEach((le, i) => {
            cumulative += t.buckets[i] ?? 0;
            values.push({ metricName: `${name}_bucket`, labels: { ...labels, le }, value: cumulative });
          });
          values.push({ metricName: `${name}_bucket`, labels: { ...labels, le: '+Inf' }, value: t.count });
          values.push({ metricName: `${name}_sum`, labels, value: t.sumS });
          values.push({ metricName: `${name}_count`, labels, value: t.count });
        }
      }
      return { name, help: 'Time a frame spends in each stage inside the node (decode, process, encode; node = decoded to encoded), seconds.', type: 'histogram', values };
    },
  };
}
