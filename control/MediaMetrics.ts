/**
 * The media node's live numbers on /metrics, read at scrape time from each stream's status (no
 * timers of our own). Labels carry the stream id; a node holds few streams, so cardinality stays
 * bounded by its capacity.
 */
import type { MediaNode } from '../media/index.ts';
import type { Metrics } from './Metrics.ts';

const STAGES = ['decode', 'process', 'encode', 'node'] as const;

/** The fields of native's FramePipelineStatus read here (the media status carries it untyped). */
interface EngineStatus {
  demo?: boolean;
  stageMs?: Record<string, number>;
  preprocessors?: { preprocessor: string; controlnet: string; demo: boolean; providers: string[] }[];
}

export function registerMediaMetrics(metrics: Metrics, node: MediaNode): void {
  const each = <L extends string>(name: string, help: string, labels: readonly L[], fill: (set: (l: Record<L, string>, v: number) => void) => void) =>
    metrics.gauge(name, help, labels, (g) => {
      g.reset();
      fill((l, v) => g.set(l, v));
    });

  each('reverie_media_streams', 'Streams held by this media node.', [], (set) => set({}, node.streamCount));
  const perStream = (name: string, help: string, value: (s: NonNullable<ReturnType<MediaNode['status']>>) => number | undefined) =>
    each(name, help, ['stream_id'], (set) => {
      for (const stream of node.streams()) {
        const v = value(stream.status());
        if (v !== undefined && Number.isFinite(v)) set({ stream_id: stream.streamId }, v);
      }
    });
  perStream('reverie_media_input_fps', 'Decoded input frames per second.', (s) => s.inputFps);
  perStream('reverie_media_output_fps', 'Encoded output frames per second.', (s) => s.outputFps);
  perStream('reverie_media_viewers', 'WHEP viewers of the stream.', (s) => s.viewers);
  each('reverie_media_viewers_by_codec', 'WHEP viewers of the stream by the video codec they are sent.', ['stream_id', 'codec'], (set) => {
    for (const stream of node.streams()) {
      for (const [codec, n] of Object.entries(stream.status().viewersByCodec)) set({ stream_id: stream.streamId, codec }, n);
    }
  });
  perStream('reverie_media_vp8_branch_running', 'The VP8 output branch (for viewers without H.264) is encoding: 1 or 0.', (s) => (s.vp8.running ? 1 : 0));
  perStream('reverie_media_ingest_packets_lost', 'RTP packets lost on ingest (from RTCP).', (s) => s.ingest?.packetsLost);
  perStream('reverie_media_ingest_bytes_received', 'Bytes received from the publisher (SRTP on the wire).', (s) => s.ingest?.bytesReceived);
  perStream('reverie_media_ingest_bytes_sent', 'Bytes sent to the publisher (SRTCP feedback on the wire).', (s) => s.ingest?.bytesSent);
  // The engine's own status (native FramePipeline.status()), when the stream runs one.
  const engine = (s: NonNullable<ReturnType<MediaNode['status']>>) => s.pipeline as EngineStatus | null;
  perStream('reverie_media_pipeline_demo', 'The stream runs a tiny random-weight DEMO base model: 1 or 0.', (s) => (engine(s) ? (engine(s)?.demo ? 1 : 0) : undefined));
  each('reverie_media_pipeline_stage_ms', 'Per-stage time of the last frame inside the diffusion pipeline, ms (control = ControlNet preprocessors).', ['stream_id', 'stage'], (set) => {
    for (const stream of node.streams()) {
      const ms = engine(stream.status())?.stageMs;
      if (!ms) continue;
      for (const [stage, v] of Object.entries(ms)) if (typeof v === 'number' && Number.isFinite(v)) set({ stream_id: stream.streamId, stage }, v);
    }
  });
  each(
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
  each('reverie_media_stage_latency_ms', 'Per-stage latency inside the node, ms (recent window).', ['stream_id', 'stage', 'quantile'], (set) => {
    for (const stream of node.streams()) {
      const latency = stream.status().latency;
      for (const stage of STAGES) {
        const sum = latency[stage];
        if (!sum) continue;
        set({ stream_id: stream.streamId, stage, quantile: '0.5' }, sum.p50);
        set({ stream_id: stream.streamId, stage, quantile: '0.95' }, sum.p95);
      }
    }
  });
}
