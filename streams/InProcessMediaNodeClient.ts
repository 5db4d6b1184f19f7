/**
 * MediaNodeClient over direct calls to the MediaNode in this process (the embedded default; the
 * bus agent of a scale-out node wraps one too). It keeps no books of its own: the plan of an
 * update, the restart count and the last error are what the node and its engine report.
 */
import type { Logger } from 'pino';
import { HlsOutput, RtmpOutputs, WhepOutput, type MediaNode, type RtmpDestination, type SoundtrackSpec, type LiveParams } from '../media/index.ts';
import type { BlobStore, Unsubscribe } from '../store/index.ts';
import type { ClipRequest, ClipResult, IngestTrackStats, MediaNodeClient, MediaNodeInfo, NodeEvent, NodeStreamStatus, ParamsUpdate, UpdateResult } from './MediaNodeClient.ts';

export interface InProcessMediaNodeClientOptions {
  node: MediaNode;
  /** Default `local`. */
  nodeId?: string;
  /** model_ids the node serves. */
  models: readonly string[];
  /** The models are demo stand-ins (see docs/api.md). */
  demo: boolean;
  logger: Logger;
  /** Where clips are written (the blob store every role shares); without it `clip` refuses. */
  blobs?: BlobStore;
}

/** The reload record a native FramePipeline keeps in its status, when the stream runs one (its engine owns it). */
function engineRestarts(pipeline: Record<string, unknown> | null | undefined) {
  if (!pipeline || typeof pipeline['restartCount'] !== 'number') return null;
  return {
    restartCount: pipeline['restartCount'] as number,
    lastRestartTime: (pipeline['lastRestartTime'] as number | null) ?? null,
    lastRestartLogs: (pipeline['lastRestartLogs'] as string[] | undefined) ?? [],
    lastError: (pipeline['lastError'] as string | null) ?? null,
    lastErrorTime: (pipeline['lastErrorTime'] as number | null) ?? null,
  };
}

export class InProcessMediaNodeClient implements MediaNodeClient {
  readonly nodeId: string;
  readonly #node: MediaNode;
  readonly #opts: InProcessMediaNodeClientOptions;
  readonly #log: Logger;
  readonly #handlers = new Set<(e: NodeEvent) => void>();
  #closed = false;

  constructor(opts: InProcessMediaNodeClientOptions) {
    this.#node = opts.node;
    this.#opts = opts;
    this.nodeId = opts.nodeId ?? 'local';
    this.#log = opts.logger.child({ module: 'InProcessMediaNodeClient' });
    const nodeId = this.nodeId;
    this.#node.on('started', (i) => this.#emit({ type: 'started', nodeId, streamId: i.streamId, startedAt: i.startedAt }));
    this.#node.on('live', (i) => this.#emit({ type: 'live', nodeId, streamId: i.streamId, lastSignalAt: i.lastSignalAt, outputFps: i.outputFps }));
    this.#node.on('ended', (i) => this.#emit({ type: 'ended', nodeId, streamId: i.streamId, startedAt: i.startedAt, endedAt: i.endedAt, reason: i.reason }));
    this.#node.on('landed', (i) => this.#emit({ type: 'landed', nodeId, ...i }));
  }

  #emit(event: NodeEvent): void {
    for (const h of this.#handlers) {
      try {
        h(event);
      } catch (err) {
        this.#log.error({ err }, `emit() | handler threw [event:${event.type}] [streamId:${event.streamId}]`);
      }
    }
  }

  async nodes(): Promise<MediaNodeInfo[]> {
    if (this.#closed || this.#node.closed) return [];
    return [
      {
        id: this.nodeId,
        publicUrl: this.#node.options.publicUrl,
        models: [...this.#opts.models],
        demo: this.#opts.demo,
        // What the node enforces on attach: streams with a publisher.
        capacity: this.#node.capacity,
        load: this.#node.activeStreamCount,
        viewers: this.#node.viewerSessionCount,
        viewerCapacity: this.#node.settings.maxViewersPerNode,
        audience: this.#node.audience(),
        countedAt: Date.now(),
      },
    ];
  }

  async updateParams(nodeId: string, update: ParamsUpdate): Promise<UpdateResult> {
    if (nodeId !== this.nodeId) return { delivered: false };
    const { change } = update;
    try {
      // A timed change waits on the node for its frame, as the keys it sets (a reload: the full
      // params), planned again where it lands; a stream not here takes it as a plain update.
      if (update.schedule) {
        const keys = change.plan.reload.length > 0 ? (Object.keys(change.target) as (keyof LiveParams)[]) : change.plan.hot;
        const params: LiveParams = Object.fromEntries(keys.map((k) => [k, change.target[k]]));
        if (this.#node.scheduleParams(update.streamId, { id: update.schedule.id, params, applyAt: update.schedule.applyAt, transition: update.schedule.transition })) {
          return { delivered: true, scheduled: true };
        }
      }
      // As it is (ParamsChange); a stream not here yet (its publisher's grant may be resolving right now) gets it when made.
      const taken = this.#node.updateParams(update.streamId, change, update.storedAt);
      if (!taken) return { delivered: false };
      return taken.plan ? { delivered: true, plan: taken.plan } : { delivered: true };
    } catch (err) {
      // The stream recorded the refusal as its last error (status shows it); the caller answers it now.
      this.#log.warn({ err }, `updateParams() | node refused the update [streamId:${update.streamId}]`);
      return { delivered: true, error: `params update failed: ${(err as Error).message}` };
    }
  }

  async status(nodeId: string, streamId: string): Promise<NodeStreamStatus | null> {
    if (nodeId !== this.nodeId) return null;
    const stream = this.#node.getStream(streamId);
    if (!stream || stream.state === 'closed') return null;
    const s = stream.status();
    const engine = engineRestarts(s.pipeline);
    // The newer of the engine's error and the stream's own (decoder, encoder, a refused update).
    const engineError = engine?.lastError != null && (s.lastError === undefined || (engine.lastErrorTime ?? 0) >= (s.lastErrorAt ?? 0));
    const publisher = stream.publisher;
    const tracks: IngestTrackStats[] = [];
    if (s.ingest) {
      tracks.push({ type: 'video', jitter: s.ingest.jitter ?? 0, packetsLost: s.ingest.packetsLost, packetsReceived: s.ingest.videoPackets, rtt: s.ingest.rtt ?? 0 });
      if (s.ingest.audioPackets > 0) tracks.push({ type: 'audio', jitter: 0, packetsLost: 0, packetsReceived: s.ingest.audioPackets, rtt: s.ingest.rtt ?? 0 });
    }
    return {
      streamId,
      rtmpOutputs: stream.readers.find(RtmpOutputs)?.outputs() ?? [],
      recordingId: stream.readers.find(HlsOutput)?.recorder?.id ?? null,
      readers: s.readers,
      soundtrack: s.soundtrack,
      ...(s.audioMappings ? { audioMappings: s.audioMappings } : {}),
      output: s.output,
      state: s.state === 'closed' ? 'idle' : s.state,
      startTime: s.startedAt ?? null,
      lastInputTime: s.lastInputAt ?? null,
      lastOutputTime: s.lastOutputAt ?? null,
      inputFps: s.inputFps,
      outputFps: s.outputFps,
      lastParams: { ...s.params },
      lastParamsUpdateTime: s.paramsUpdatedAt ?? s.startedAt ?? null,
      // The engine owns its reloads; a stream without one (no publisher yet, image chains alone) has none.
      restartCount: engine?.restartCount ?? 0,
      lastRestartTime: engine?.lastRestartTime ?? null,
      lastRestartLogs: engine?.lastRestartLogs ?? [],
      lastError: engineError ? engine.lastError : (s.lastError ?? null),
      lastErrorTime: engineError ? engine.lastErrorTime : s.lastErrorAt,
      pipelineError: typeof s.pipeline?.['buildError'] === 'string' ? s.pipeline['buildError'] : null,
      ingest:
        s.ingest && publisher
          ? { sessionId: publisher.id, codec: s.ingest.codec, bytesReceived: s.ingest.bytesReceived, bytesSent: s.ingest.bytesSent, tracks }
          : null,
      viewers: stream.readers.find(WhepOutput)?.viewerCount ?? 0,
      framesOut: s.framesOut,
      stageLatency: Object.fromEntries(
        (['decode', 'process', 'encode', 'node'] as const).flatMap((k) => {
          const v = s.latency[k];
          return v ? [[k, { p50: v.p50, p95: v.p95 }]] : [];
        }),
      ),
    };
  }

  async endStream(nodeId: string, streamId: string): Promise<boolean> {
    if (nodeId !== this.nodeId) return false;
    return this.#node.endStream(streamId);
  }

  async setRtmpDestinations(nodeId: string, streamId: string, dests: RtmpDestination[]): Promise<boolean> {
    if (nodeId !== this.nodeId) return false;
    return this.#node.setRtmpDestinations(streamId, dests);
  }

  async setRecording(nodeId: string, streamId: string, on: boolean): Promise<boolean> {
    if (nodeId !== this.nodeId) return false;
    return this.#node.setRecording(streamId, on);
  }

  async setSoundtrack(nodeId: string, streamId: string, soundtrack: SoundtrackSpec | null): Promise<boolean> {
    if (nodeId !== this.nodeId) return false;
    return this.#node.setSoundtrack(streamId, soundtrack);
  }

  async clip(nodeId: string, streamId: string, req: ClipRequest): Promise<ClipResult | null> {
    if (nodeId !== this.nodeId) return null;
    const blobs = this.#opts.blobs;
    if (!blobs) throw new Error('this media node has no blob store to write clips to');
    return this.#node.clip(streamId, req.seconds, blobs.pathOf(req.key));
  }

  async cancelScheduled(nodeId: string, streamId: string, id: string): Promise<boolean> {
    if (nodeId !== this.nodeId) return false;
    return this.#node.cancelScheduled(streamId, id);
  }

  async subscribe(handler: (event: NodeEvent) => void): Promise<Unsubscribe> {
    this.#handlers.add(handler);
    return async () => {
      this.#handlers.delete(handler);
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#handlers.clear();
  }
}
