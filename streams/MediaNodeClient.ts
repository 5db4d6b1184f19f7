/**
 * How the control plane talks to media nodes — the only way it does (design.md "One codebase,
 * three roles"). Every call and event carries plain JSON, addressed by node id, so the interface
 * maps one to one onto the store's bus for scale-out:
 *   - `nodes()`           ← a registry the nodes heartbeat into;
 *   - `updateParams()`    → request on `media.<nodeId>.params` (the parameter channel), reply on a
 *                           per-request channel;
 *   - `status()`, `endStream()` → the same request/reply pattern;
 *   - `subscribe()`       ← `media.events` (started / live / ended from every node).
 * The embedded default implements it with direct calls (InProcessMediaNodeClient).
 */
import type { AudioMappingStatus, ClipResult, ReaderStatus, RtmpDestination, RtmpDestinationStatus, SoundtrackSpec, SoundtrackStatus } from '../media/index.ts';
import type { ParamsChange, StreamParams, UpdatePlan } from '../native/params/index.ts';
import type { Unsubscribe } from '../store/index.ts';

export interface MediaNodeInfo {
  id: string;
  /** Base URL of the node's WHIP/WHEP endpoints. */
  publicUrl: string;
  /** model_ids this node can serve. */
  models: string[];
  /** True when those models are demo stand-ins (tiny random weights or none): status says so. */
  demo: boolean;
  /** Streams the node holds at most. */
  capacity: number;
  /** Streams it holds now. */
  load: number;
  /** WHEP sessions on the node, connected or still connecting, all streams, relayed ones too (0 from a node older than the cascade). */
  viewers: number;
  /** Connected viewers it carries at most (its WHEP_VIEWERS_PER_NODE); 0: unknown (an older node: never an edge). */
  viewerCapacity: number;
  /** What it carries of each stream, by stream id: as the stream's origin or as an edge relaying it (decision 0030). */
  audience: Record<string, StreamAudience>;
  /** When these counts were taken, ms epoch (a registry beat's time; now for the node in this process). */
  countedAt: number;
}

/** What one node carries of one stream (its viewers there). */
export interface StreamAudience {
  role: 'origin' | 'edge';
  /** Connected WHEP viewers there (an origin's count includes the edges' pulls). */
  viewers: number;
  /** WHEP sessions there, connected or still connecting: what placement counts. */
  sessions: number;
  /** Of the connected, edges' pulls (origin only). */
  edges: number;
}

/**
 * A change as the API planned it, once, over the stored params (ParamsChange: the full params after
 * it and its plan), carried to the node and on to the engine unchanged; the node reports back the
 * plan its processor ran (UpdateResult.plan), which is this one.
 */
export interface ParamsUpdate {
  streamId: string;
  change: ParamsChange;
  /**
   * When the store wrote the change's params (ms epoch): the node ignores what is older than the
   * params it holds (a publisher's grant read before this update). Optional for older senders.
   */
  storedAt?: number;
  /**
   * A timed change (the control WebSocket): the node holds it and applies it to the first frame
   * captured at or after `applyAt` (ms epoch; null = the next frame), optionally as a transition
   * over that many frames, and reports where it landed with a `landed` event. Without it the
   * update applies now.
   */
  schedule?: { id: string; applyAt: number | null; transition?: { steps: number; method: 'linear' | 'slerp' } };
}

export interface UpdateResult {
  /** False when the stream is not running on that node (the params apply at its next ingest). */
  delivered: boolean;
  /**
   * The plan the stream's processor ran for this update (the change's own, with the params the
   * node restores itself when audio mappings change): what `x-params-update` reports. Absent when no processor took it now (no
   * publisher yet, a pipeline still loading, params that pass frames through, a scheduled
   * change): the processor built later starts from the latest params.
   */
  plan?: UpdatePlan;
  /** The node could not apply the update (it kept serving the previous params). */
  error?: string;
  /** The node holds the scheduled change and will send a `landed` event for it (ParamsUpdate.schedule). */
  scheduled?: boolean;
}

export interface IngestTrackStats {
  type: 'video' | 'audio';
  /** Seconds. */
  jitter: number;
  packetsLost: number;
  packetsReceived: number;
  /** Seconds. */
  rtt: number;
}

export interface IngestMetrics {
  /** The publisher's WebRTC session id. */
  sessionId: string;
  codec: string;
  bytesReceived: number;
  bytesSent: number;
  tracks: IngestTrackStats[];
}

/** A stream as its node sees it. Times are ms since the epoch. */
export interface NodeStreamStatus {
  streamId: string;
  /** Every RTMP destination with its push state (absent from nodes older than the field). */
  rtmpOutputs?: RtmpDestinationStatus[];
  /**
   * Each reader of the stream's output by name (whep, hls, rtmp, and any other output the node
   * runs): its kind, whether it is watched and by how many. Absent from nodes older than the field.
   */
  readers?: Record<string, ReaderStatus>;
  /** Id of the recording the node is writing now (absent or null when none). */
  recordingId?: string | null;
  /** The soundtrack the node mixes into the output audio, where it is (absent or null when none). */
  soundtrack?: SoundtrackStatus | null;
  /** Each audio mapping's feature and the value it gave its param now (absent without mappings). */
  audioMappings?: AudioMappingStatus[];
  /**
   * What the outputs carry (decision 0011): `live` frames, the `slate` (no live frame while someone
   * watches), or `none` (nothing encoded). Absent from nodes older than the field.
   */
  output?: 'live' | 'slate' | 'none';
  /** - `idle`: no publisher; `connecting`: publisher attached, no output yet; `live`: output flowing. */
  state: 'idle' | 'connecting' | 'live';
  /** When the current publisher session's pipeline started (first output), or when it attached. */
  startTime: number | null;
  lastInputTime: number | null;
  lastOutputTime: number | null;
  inputFps: number;
  outputFps: number;
  /** The params the node holds: every key once a publisher's grant arrived; before, only the PATCHed ones. */
  lastParams: Partial<StreamParams>;
  /** When the node last took params (a PATCH, or the publisher's grant). */
  lastParamsUpdateTime: number | null;
  /** Reloads of the stream's engine (its own count; 0 while none runs). */
  restartCount: number;
  lastRestartTime: number | null;
  /** Log lines of the engine's last reload. */
  lastRestartLogs: string[];
  /** The newest error of the engine or of the stream's media path, with its time. */
  lastError: string | null;
  lastErrorTime: number | null;
  /**
   * Why the pipeline the params ask for could not be built, while a fallback (the previous pipeline
   * or the image processors alone) keeps the output flowing; null or absent when none.
   */
  pipelineError?: string | null;
  ingest: IngestMetrics | null;
  viewers: number;
  /** Video frames sent to viewers since the publisher session started (absent from older nodes). */
  framesOut?: number;
  /**
   * ms per stage of the node (rolling windows): decode = a whole frame in → decoded; process = the
   * frame processor; encode = push → encoded; node = decoded frame in → encoded frame out.
   */
  stageLatency?: Partial<Record<'decode' | 'process' | 'encode' | 'node', { p50: number; p95: number }>>;
}

/** ms since the epoch on the node's clock. */
export type NodeEvent =
  | { type: 'started'; nodeId: string; streamId: string; startedAt: number }
  | { type: 'live'; nodeId: string; streamId: string; lastSignalAt: number; outputFps: number }
  | { type: 'ended'; nodeId: string; streamId: string; startedAt: number; endedAt: number; reason: string }
  | ({ type: 'landed'; nodeId: string } & LandedInfo);

/**
 * Where a scheduled change (ParamsUpdate.schedule) landed on the node. `kind`: `applied` (the
 * change, or the first step of its transition) or `done` (the last step of its transition).
 */
export interface LandedInfo {
  streamId: string;
  id: string;
  kind: 'applied' | 'done';
  error: string | null;
  /** When the node applied it, ms epoch. */
  appliedAt: number;
  /** The output frame that first carries it (the stream's framesOut numbering); null without frames. */
  frame: number | null;
  /** That frame's capture time on the node's clock, ms epoch (null without frames). */
  frameAt: number | null;
  /** Capture time of the frame before it, ms epoch: the change was not due yet then. */
  prevFrameAt: number | null;
  /** RTP timestamp (90 kHz) of that frame as H.264 WHEP viewers receive it. */
  rtpTimestamp: number | null;
}

export interface ClipRequest {
  /** 1–60. */
  seconds: number;
  /** Blob key of the MP4 to write. */
  key: string;
}

export interface MediaNodeClient {
  /** Nodes that can take streams now. */
  nodes(): Promise<MediaNodeInfo[]>;
  /** Hands an update to the node that owns the stream over the parameter channel. */
  updateParams(nodeId: string, update: ParamsUpdate): Promise<UpdateResult>;
  /** Live values; null when the node does not hold the stream (no live pipeline). */
  status(nodeId: string, streamId: string): Promise<NodeStreamStatus | null>;
  /** Ends the publisher and viewers; false when the node does not hold the stream. */
  endStream(nodeId: string, streamId: string): Promise<boolean>;
  /**
   * Writes the newest `seconds` of the stream's output as an MP4 to the blob `key` (the blob store
   * every role shares); null when the node holds no output of the stream.
   */
  clip(nodeId: string, streamId: string, req: ClipRequest): Promise<ClipResult | null>;
  /** Drops a change the node holds for a stream (ParamsUpdate.schedule); false when none waits by that id. */
  cancelScheduled(nodeId: string, streamId: string, id: string): Promise<boolean>;
  /** Sets a stream's extra RTMP destinations on the node, live; false when the node does not hold the stream. */
  setRtmpDestinations(nodeId: string, streamId: string, dests: RtmpDestination[]): Promise<boolean>;
  /** Turns recording of the stream's output on or off live; false when the node does not hold the stream. */
  setRecording(nodeId: string, streamId: string, on: boolean): Promise<boolean>;
  /**
   * Sets (null: clears) the song mixed into the stream's output audio, live; resolves once the
   * node plays it; false when the node does not hold the stream.
   */
  setSoundtrack(nodeId: string, streamId: string, soundtrack: SoundtrackSpec | null): Promise<boolean>;
  subscribe(handler: (event: NodeEvent) => void): Promise<Unsubscribe>;
  /** Idempotent. */
  close(): Promise<void>;
}

export type { ClipResult, SoundtrackSpec };
