/**
 * The status record of a stream (spec "Stream status record"): what its record in the store and its
 * media node's live values say, shaped as ai-runner and the gateway shape it. OFFLINE (and no
 * timestamps) unless the node holds the stream live; the runner state from the node's live values.
 * Text from inside the server (errors, restart logs) carries no filesystem paths.
 */
import type { StreamEndReason, StreamRecord } from '../store/index.ts';
import { withoutPaths } from '../errors/index.ts';
import { paramsHash, publicParams, type StreamParams } from './StreamParams.ts';
import type { MediaNodeInfo, NodeStreamStatus } from './MediaNodeClient.ts';

/**
 * - `linear`: weights move linearly from the old value to the new one (prompt embeddings or seed
 *   noise are mixed linearly by the engine);
 * - `slerp`: the engine interpolates spherically (smoother for prompts; the spec's advice).
 */
export type TransitionMethod = 'linear' | 'slerp';

/** A change scheduled over the control WebSocket, shown in status until the node applies it. */
export interface ScheduledView {
  id: string;
  /** ms since the epoch. */
  due_at: number;
  on_beat: boolean;
  /** The params the change sets. */
  keys: string[];
  transition: { steps: number; method: TransitionMethod } | null;
}

export type RunnerState = 'OFFLINE' | 'LOADING' | 'ONLINE' | 'DEGRADED_INPUT' | 'DEGRADED_INFERENCE' | 'ERROR';

export interface StatusViewInput {
  stream: StreamRecord;
  /** The stream's WHEP playback URL. */
  whepUrl: string;
  /** The owning node's live values; null when it has none (no node, not held, unreachable). */
  node: NodeStreamStatus | null;
  nodeInfo: MediaNodeInfo | null;
  /** Every live media node, for the stream's audience across them (origin and edges); default none. */
  nodes?: readonly MediaNodeInfo[];
  /** ms since the epoch. */
  now: number;
}

/** The stream's viewers across the cluster, from the nodes' registry beats (≤ 1 s old): each node's, and their sum (edges' pulls not counted as viewers). */
function audienceView(streamId: string, nodes: readonly MediaNodeInfo[]): NonNullable<StatusData['audience']> | null {
  const per = nodes.flatMap((n) => {
    const a = n.audience[streamId];
    return a ? [{ node: n.id, role: a.role, viewers: a.viewers - a.edges }] : [];
  });
  if (per.length === 0) return null;
  return { viewers: per.reduce((k, p) => k + p.viewers, 0), nodes: per };
}

export function statusView({ stream, whepUrl, node, nodeInfo, nodes = [], now }: StatusViewInput): StatusData {
  const params = stream.params;
  const live = node !== null && node.state !== 'idle' && stream.state !== 'ended';
  const base = {
    stream_id: stream.id,
    request_id: node?.ingest?.sessionId ?? '',
    // One value wherever a pipeline_id appears (status and webhook events): the stream's pipeline.
    pipeline_id: stream.pipeline,
    type: 'status' as const,
    pipeline: 'streamdiffusion',
    orchestrator_info: { address: stream.nodeId ?? '', url: nodeInfo?.publicUrl ?? '' },
    demo: nodeInfo?.demo ?? false,
  };
  if (!live) {
    // Teardown: OFFLINE and no timestamp anywhere (spec "Stream status record").
    const endReason: StreamEndReason | null = stream.deleted ? 'deleted' : stream.state === 'ended' ? stream.endReason : null;
    return {
      ...base,
      state: 'OFFLINE',
      ...(endReason !== null ? { end_reason: endReason } : {}),
      // The slate outlives the publisher (decision 0011): OFFLINE, yet viewers still get a picture.
      ...(node?.output ? { output: node.output } : {}),
      ...outputsView(node),
      inference_status: {
        pipeline: 'streamdiffusion',
        last_params: publicParams(params),
        last_params_hash: paramsHash(publicParams(params)),
        input_fps: 0,
        output_fps: 0,
        restart_count: node?.restartCount ?? 0,
        last_restart_logs: (node?.lastRestartLogs ?? []).map(withoutPaths),
        last_error: withoutPaths(node?.lastError ?? ''),
        stream_id: stream.id,
      },
      gateway_status: { whep_url: whepUrl, ingest_metrics: { stats: emptyStats() } },
    };
  }
  const state = runnerState(node, now);
  const lastParams = publicParams(node.lastParams as StreamParams);
  return {
    ...base,
    state,
    last_state_update_time: now,
    ...(node.output ? { output: node.output } : {}),
    ...(node.stageLatency && Object.keys(node.stageLatency).length > 0 ? { stage_latency_ms: node.stageLatency } : {}),
    viewers: node.viewers,
    ...((a) => (a ? { audience: a } : {}))(audienceView(stream.id, nodes)),
    ...(node.framesOut !== undefined ? { frames_out: node.framesOut } : {}),
    ...outputsView(node),
    ...(node.audioMappings
      ? { audio_mappings: node.audioMappings.map((m) => ({ source: m.source, feature: m.feature, param: m.param, feature_value: m.featureValue, value: m.value })) }
      : {}),
    inference_status: {
      pipeline: 'streamdiffusion',
      start_time: node.startTime ?? 0,
      last_params_update_time: node.lastParamsUpdateTime ?? node.startTime ?? 0,
      last_params: lastParams,
      last_params_hash: paramsHash(lastParams),
      input_fps: node.inputFps,
      output_fps: node.outputFps,
      last_input_time: node.lastInputTime ?? 0,
      last_output_time: node.lastOutputTime ?? 0,
      restart_count: node.restartCount,
      last_restart_time: node.lastRestartTime ?? 0,
      last_restart_logs: node.lastRestartLogs.map(withoutPaths),
      last_error: withoutPaths(node.lastError ?? ''),
      stream_id: stream.id,
    },
    gateway_status: {
      whep_url: whepUrl,
      ...(node.lastError !== null ? { error: { error_message: withoutPaths(node.lastError), error_time: node.lastErrorTime ?? now } } : {}),
      ingest_metrics: { stats: ingestStats(node) },
    },
  };
}

export interface OutputView {
  name: string;
  kind: string;
  watched: boolean;
  consumers: number;
}

/** The node's readers as the API shows them: every one, whatever its kind (the view knows none by name). */
function outputsView(node: NodeStreamStatus | null): { outputs?: OutputView[] } {
  if (!node?.readers) return {};
  return { outputs: Object.entries(node.readers).map(([name, r]) => ({ name, kind: r.kind, watched: r.watched, consumers: r.consumers })) };
}

export interface TrackStatsView {
  type: string;
  jitter: number;
  packets_lost: number;
  packets_received: number;
  packet_loss_pct: number;
  rtt: number;
  warnings: string[];
}

export interface IngestStatsView {
  peer_conn_stats: { ID: string; BytesReceived: number; BytesSent: number };
  conn_quality: 'good' | 'fair' | 'poor' | 'unknown';
  track_stats: TrackStatsView[];
}

export interface StatusData {
  stream_id: string;
  request_id: string;
  pipeline_id: string;
  type: 'status';
  pipeline: string;
  orchestrator_info: { address: string; url: string };
  demo: boolean;
  state: RunnerState;
  last_state_update_time?: number;
  /**
   * Why the stream is OFFLINE when its session ended or it was deleted: the `stream.ended` reason,
   * `deleted` once DELETE landed (even if it never started); absent otherwise (an addition to the spec).
   */
  end_reason?: StreamEndReason;
  /** ms per stage on the media node, p50/p95 over its recent frames (an addition to the spec). */
  stage_latency_ms?: Partial<Record<'decode' | 'process' | 'encode' | 'node', { p50: number; p95: number }>>;
  /** WHEP viewers now on the stream's own node, edges' pulls included (absent when OFFLINE; an addition to the spec). */
  viewers?: number;
  /**
   * Scale-out: the stream's WHEP viewers across media nodes, from their registry beats (≤ 1 s old):
   * the stream's node (`origin`) and the nodes relaying it (`edge`), each with its own viewers
   * (an edge's pull is not counted as a viewer), and their sum (an addition to the spec).
   */
  audience?: { viewers: number; nodes: { node: string; role: 'origin' | 'edge'; viewers: number }[] };
  /** Output frames since the publisher session started (absent when OFFLINE; an addition to the spec). */
  frames_out?: number;
  /** Each output (reader) of the stream on its node: present while the node holds the stream (an addition to the spec). */
  outputs?: OutputView[];
  /** Each audio mapping's feature (smoothed, 0–1) and the value it gave its param on the last frame; null before any audio. */
  audio_mappings?: { source: string; feature: string; param: string; feature_value: number | null; value: number | null }[];
  /** Changes scheduled over the control WebSocket, soonest first, until applied (an addition to the spec). */
  scheduled_updates?: ScheduledView[];
  inference_status: {
    pipeline: string;
    start_time?: number;
    last_params_update_time?: number;
    last_params: unknown;
    last_params_hash: string;
    input_fps: number;
    output_fps: number;
    last_input_time?: number;
    last_output_time?: number;
    restart_count: number;
    last_restart_time?: number;
    last_restart_logs: string[];
    last_error: string;
    stream_id: string;
  };
  /** What the outputs carry: `live`, `slate` (publisher away or output stalled) or `none`. */
  output?: 'live' | 'slate' | 'none';
  gateway_status: {
    whep_url: string;
    error?: { error_message: string; error_time: number };
    ingest_metrics: { stats: IngestStatsView };
  };
}

function emptyStats(): IngestStatsView {
  return { peer_conn_stats: { ID: '', BytesReceived: 0, BytesSent: 0 }, conn_quality: 'unknown', track_stats: [] };
}

/** Thresholds behind `conn_quality` and track warnings (WebRTC rules of thumb, documented). */
export const QUALITY = { fairLossPct: 2, poorLossPct: 10, fairJitterS: 0.03, poorJitterS: 0.1, fairRttS: 0.3, poorRttS: 1 } as const;

function ingestStats(node: NodeStreamStatus): IngestStatsView {
  const ingest = node.ingest;
  if (!ingest) return emptyStats();
  let worst: 0 | 1 | 2 = 0;
  const tracks = ingest.tracks.map((t) => {
    const total = t.packetsReceived + t.packetsLost;
    const loss = total > 0 ? (100 * t.packetsLost) / total : 0;
    const warnings: string[] = [];
    const grade = (v: number, fair: number, poor: number, what: string) => {
      if (v >= poor) {
        warnings.push(`high ${what}`);
        worst = 2;
      } else if (v >= fair) {
        warnings.push(`elevated ${what}`);
        worst = Math.max(worst, 1) as 0 | 1 | 2;
      }
    };
    grade(loss, QUALITY.fairLossPct, QUALITY.poorLossPct, 'packet loss');
    grade(t.jitter, QUALITY.fairJitterS, QUALITY.poorJitterS, 'jitter');
    grade(t.rtt, QUALITY.fairRttS, QUALITY.poorRttS, 'round-trip time');
    if (t.type === 'video' && node.inputFps < 15) warnings.push('low input frame rate');
    return { type: t.type, jitter: t.jitter, packets_lost: t.packetsLost, packets_received: t.packetsReceived, packet_loss_pct: Math.round(loss * 100) / 100, rtt: t.rtt, warnings };
  });
  return {
    peer_conn_stats: { ID: ingest.sessionId, BytesReceived: ingest.bytesReceived, BytesSent: ingest.bytesSent },
    conn_quality: (['good', 'fair', 'poor'] as const)[worst],
    track_stats: tracks,
  };
}

/** ai-runner `_compute_current_state` over the node's live values (reference §2.5). */
export function runnerState(s: NodeStreamStatus, now: number): RunnerState {
  if (s.state === 'idle') return 'OFFLINE';
  // The requested pipeline cannot be built: a fallback serves, but the stream is not what was asked.
  if (s.pipelineError) return 'ERROR';
  if (s.state === 'connecting') {
    const since = s.startTime ?? s.lastInputTime ?? now;
    return s.lastOutputTime === null && now - since > 180_000 ? 'ERROR' : 'LOADING';
  }
  if ((s.lastErrorTime !== null && now - s.lastErrorTime < 15_000) || (s.lastRestartTime !== null && now - s.lastRestartTime < 60_000)) return 'DEGRADED_INFERENCE';
  if (s.lastInputTime === null || now - s.lastInputTime > 2_000 || s.inputFps < 15) return 'DEGRADED_INPUT';
  if (s.lastOutputTime === null || now - s.lastOutputTime > 2_000 || s.outputFps < Math.min(10, 0.8 * s.inputFps)) return 'DEGRADED_INFERENCE';
  if (s.lastOutputTime < s.lastInputTime - 1_000 && now - s.lastOutputTime > 5_000) return 'DEGRADED_INFERENCE';
  return 'ONLINE';
}
