// Types of web/reverie-client.js (hand-written: the module needs no build step).

export declare const BACKOFF: Readonly<{ initialMs: number; maxMs: number; factor: number; jitter: number }>;
/** ms before retry number `attempt` (0-based): initialMs × factor^attempt, at most maxMs, ± jitter. */
export declare function backoffDelay(attempt: number, opts?: typeof BACKOFF): number;

/** The Area B error envelope. */
export interface ErrorEnvelope {
  success: false;
  error: string;
  code: string;
  status: number;
  details: unknown;
  requestId: string;
  traceId: string;
}

export declare class ReverieError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details: unknown;
  readonly envelope: ErrorEnvelope;
  constructor(envelope: Partial<ErrorEnvelope>);
}

export type Params = Record<string, unknown>;

export interface Stream {
  id: string;
  stream_key: string;
  whip_url: string;
  output_playback_id: string;
  output_stream_url: string;
  params: Params;
  [field: string]: unknown;
}

export interface UpdateAck {
  type: 'ack';
  id: string;
  mode: 'none' | 'hot' | 'reload';
  hot: string[];
  reload: string[];
  censored: boolean;
  node_error: string | null;
  /** ms since the epoch (server clock); null when applied on arrival. */
  due_at: number | null;
  applied_at: number;
  /** The output frame that first carries the change (frames_out numbering); null without live output. */
  frame: number | null;
  /** That frame's capture time, ms since the epoch on the server's clock; null without a frame. */
  frame_at: number | null;
  /** Capture time of the frame before it (not yet due then); null without a frame. */
  prev_frame_at: number | null;
  /** RTP timestamp (90 kHz) WHEP viewers receive that frame with (requestVideoFrameCallback's rtpTimestamp). */
  rtp_timestamp: number | null;
  transition: { steps: number; method: 'linear' | 'slerp'; frame_ms: number; ends_at: number } | null;
}

export interface ScheduledView {
  id: string;
  due_at: number;
  on_beat: boolean;
  keys: string[];
  transition: { steps: number; method: 'linear' | 'slerp' } | null;
}

export interface Stats {
  type: 'stats';
  time: number;
  state: string;
  input_fps: number;
  output_fps: number;
  stage_latency_ms: Partial<Record<'decode' | 'process' | 'encode' | 'node', { p50: number; p95: number }>>;
  viewers: number;
  frames_out: number;
  ingest_quality: 'good' | 'fair' | 'poor' | 'unknown';
}

export interface TempoInput {
  bpm?: number;
  /** ms since the epoch (server clock) of a downbeat. */
  phase?: number;
  beats_per_bar?: number;
  tempo_from_song?: string;
}

export interface UpdateOptions {
  id?: string;
  /** ms since the epoch on the server clock (see ControlChannel.serverNow). */
  at?: number;
  onBeat?: true | { every: number | 'bar' };
  transition?: { steps: number; method?: 'linear' | 'slerp' };
  tempo?: TempoInput;
  /** Called when the server holds the update for later. */
  onQueued?: (view: ScheduledView & { type: 'queued' }) => void;
}

export declare class ControlChannel extends EventTarget {
  constructor(url: string, getToken: () => Promise<string>);
  /** Resolves on the first `hello`. */
  readonly ready: Promise<ControlChannel>;
  clockOffset: number;
  connected: boolean;
  reconnects: number;
  status: Record<string, unknown> | null;
  stats: Stats | null;
  serverNow(): number;
  update(params: Params, opts?: UpdateOptions): Promise<UpdateAck>;
  setTempo(tempo: TempoInput): void;
  cancel(id: string): void;
  ping(): void;
  close(): void;
}

export type RtcState = 'connecting' | 'connected' | 'reconnecting' | 'closed';

export interface RtcSession extends EventTarget {
  readonly ready: Promise<RtcSession>;
  readonly pc: RTCPeerConnection | null;
  readonly url: string | null;
  readonly state: RtcState;
  readonly reconnects: number;
  close(): void;
}

export declare class ReverieClient {
  constructor(opts?: { baseUrl?: string; apiKey?: string; getControlToken?: (streamId: string) => Promise<string> });
  readonly baseUrl: string;
  request<T = unknown>(method: string, path: string, body?: unknown): Promise<T>;
  capabilities(): Promise<Record<string, unknown>>;
  createStream(body?: { pipeline?: 'streamdiffusion'; params?: Params; name?: string; output_rtmp_url?: string }): Promise<Stream>;
  getStream(id: string): Promise<Stream>;
  updateStream(id: string, params: Params): Promise<Stream>;
  status(id: string): Promise<Record<string, unknown>>;
  deleteStream(id: string): Promise<{ success: true; data: Record<string, never> }>;
  controlToken(id: string): Promise<{ token: string; expires_at: number; url: string }>;
  control(streamId: string): ControlChannel;
  publish(stream: Stream, media: MediaStream, opts?: { graceMs?: number }): RtcSession;
  play(stream: Pick<Stream, 'output_playback_id'> & Partial<Stream>, video: HTMLVideoElement, opts?: { graceMs?: number }): RtcSession;
}
