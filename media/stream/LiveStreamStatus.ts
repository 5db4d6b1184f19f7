/**
 * What a live stream reports: its state, its events (MediaNode forwards them to the control
 * plane) and its status. LiveStream.status() assembles the status from the objects that own each
 * fact (ingest, frame slot, encoder, readers, slate, soundtrack).
 */
import type { AudioMappingStatus } from './AudioMappings.ts';
import type { PixelFormat, LiveParams } from './FrameProcessor.ts';
import type { ProcessorState } from './FrameSlot.ts';
import type { ParamsLanding } from './ParamsLandings.ts';
import type { RenditionStatus } from './Rendition.ts';
import type { SlateStatus } from './SlateSwitch.ts';
import type { SoundtrackStatus } from './Soundtrack.ts';
import type { StageStats } from '../StageTimer.ts';
import type { ReaderStatus } from '../StreamReader.ts';
import type { IngestStats, SessionCloseReason } from '../webrtc/WhipSession.ts';

/**
 * - `idle`: no publisher.
 * - `connecting`: a publisher is attached; no processed frame has gone out yet.
 * - `live`: processed frames are flowing to the encoder.
 * - `closed`: disposed; every method throws InvalidStateError.
 */
export type LiveStreamState = 'idle' | 'connecting' | 'live' | 'closed';

export interface StartedInfo {
  streamId: string;
  /** ms epoch of the first output frame of this publisher session. */
  startedAt: number;
}
export interface LiveInfo {
  streamId: string;
  /** ms epoch of the last output frame: the last moment the stream was confirmed live. */
  lastSignalAt: number;
  outputFps: number;
}
export interface EndedInfo {
  streamId: string;
  startedAt: number;
  /** ms epoch of the last output frame (what stream.ended's ended_at reports). */
  endedAt: number;
  reason: SessionCloseReason;
}

export type LiveStreamEvents = {
  started: [StartedInfo];
  live: [LiveInfo];
  ended: [EndedInfo];
  /** No publisher and no viewers for idleStreamMs: the node disposes the stream. */
  idle: [];
  /** A scheduled change (scheduleParams) landed: on a frame, or without one (no frames flowing). */
  landed: [ParamsLanding];
  close: [];
};

export interface LiveStreamStatus {
  streamId: string;
  state: LiveStreamState;
  /** `live` while live frames reach the outputs, `slate` while the slate does, `none` when nothing is encoded. */
  output: 'live' | 'slate' | 'none';
  slate: SlateStatus;
  /** ms epoch. */
  startedAt: number | undefined;
  lastInputAt: number | undefined;
  lastOutputAt: number | undefined;
  /** Whole frames a second received from the publisher (what the streamer sends). */
  inputFps: number;
  /** Frames a second decoded (below inputFps when the node is overloaded). */
  decodedFps: number;
  outputFps: number;
  framesIn: number;
  framesOut: number;
  /**
   * How far the output timeline sits after the capture time of the last live frame, ms (OutputClock:
   * 0 to a few ms usually, up to 150 after a run that started late). Viewers' sound is held by the
   * picture's lag behind its output time, so that hold is this much shorter than the picture's delay.
   */
  outputLateMs: number;
  framesDropped: number;
  /** Decoders rebuilt after a pipeline error (corrupt input). */
  decoderRestarts: number;
  processor: ProcessorState;
  /** Layout the decoder hands frames in: I420 when nothing processes them, RGB otherwise; null without a decoder. */
  pixelFormat: PixelFormat | null;
  /** ms per stage (rolling window): decode = last packet of a frame in → RGB out; node = decode+process+encode. */
  latency: { decode?: StageStats; process?: StageStats; encode?: StageStats; node?: StageStats };
  ingest: IngestStats | null;
  /** Forced key units of the H.264 encoder. */
  keyUnitsForced: number;
  /** Each reader of the output by name (whep, hls, rtmp, …), in the order they were added. */
  readers: Record<string, ReaderStatus>;
  /** The smaller encodes running now (settings `renditions`; empty while no reader wants them). */
  renditions: RenditionStatus[];
  /** The soundtrack set on the stream (null: none), where it is on the node's clock. */
  soundtrack: SoundtrackStatus | null;
  params: LiveParams;
  /** When the stream last took a params update (ms epoch), null before any. */
  paramsUpdatedAt: number | null;
  lastError: string | undefined;
  /** When `lastError` was set (ms epoch), null without one. */
  lastErrorAt: number | null;
  /** The frame pipeline's own status (native FramePipeline: restarts, provider, demo…), or null. */
  pipeline: Record<string, unknown> | null;
  /** Each audio mapping's feature and the value it gave its param (absent without mappings). */
  audioMappings?: AudioMappingStatus[];
  /** With audio mappings: frames whose wait for the publisher's audio of their time ran out (their params followed the sound a frame late; a busy node). */
  audioMappingWaitsExpired?: number;
}
