/**
 * Public API of the media node: WHIP ingest → decode → frame processor → encode once → WHEP
 * viewers, LL-HLS (/hls/{playbackId}/index.m3u8) and an optional RTMP push. The control plane
 * creates one MediaNode per process, registers its routes on the fastify app, and listens for
 * `started` / `live` / `ended`.
 */
export { MediaNode, DEFAULT_CAPACITY, type AdmissionRequest, type AdmissionVerdict, type ClientInfo, type ClipResult, type IngestGrant, type IngestRefusal, type MediaNodeEvents, type MediaNodeOptions, type PlaybackTarget } from './MediaNode.ts';
export { FORWARDED_HEADER, PUBLIC_ROUTE, WHIP_POST, WHIP_WHEP_CORS, forwardedFor } from './WhipWhepRoutes.ts';
export { registerMediaRoutes } from './MediaRoutes.ts';
export { turnCredential, type TurnConfig, type TurnCredential } from './IceServers.ts';
export { DEFAULT_UDP_RECV_BUFFER_BYTES, udpRecvBufferCap } from './PeerTransport.ts';
export type { ParamsTransition, ScheduledParams } from './ParamsSchedule.ts';
export type { EndedInfo, LiveInfo, LiveStream, LiveStreamState, LiveStreamStatus, StartedInfo } from './LiveStream.ts';
export type { ParamsLanding } from './ParamsLandings.ts';
export type { Vp8BranchStatus } from './Vp8Branch.ts';
export { STAGE_BUCKETS_S, type StageStats, type StageTotals } from './StageTimer.ts';
export type { VideoCodec } from './Sdp.ts';
export type { IngestStats, SessionCloseReason } from './WhipSession.ts';
export type { HlsPackagerStats } from './HlsPackager.ts';
export { CLIP_MAX_SECONDS } from './ClipBuffer.ts';
export * from './RecordingFiles.ts';
export { SLATE_IMAGE_MAX_SIDE, SLATE_PAD_RGB, slateImageKey } from './SlateImage.ts';
export type { RecordingWriterStats } from './RecordingWriter.ts';
export { recordingRuns, remuxRecordingMp4 } from './RecordingMp4.ts';
export type { RtmpPushState, RtmpPushStatus } from './RtmpPush.ts';
export { redactRtmpUrl, type OutboundPolicy } from './RtmpRelay.ts';
export { MAX_RTMP_DESTINATIONS, type RtmpDestination, type RtmpDestinationStatus } from './RtmpOutputs.ts';
export { PRIMARY_RTMP } from './StreamOutputs.ts';
export { SOUNDTRACK_SAMPLE_RATE, type SoundtrackSpec, type SoundtrackState, type SoundtrackStatus } from './Soundtrack.ts';
export { AudioFeatures, HOP_SAMPLES, type AudioHop } from './AudioFeatures.ts';
export type { AudioMappingStatus } from './AudioMappings.ts';
export {
  ImageChainProcessor,
  chainActive,
  defaultProcessorFactory,
  frameBytes,
  imageChainsIdle,
  type PixelFormat,
  type Frame,
  type FrameProcessor,
  type FrameProcessorFactory,
  type StreamParams,
} from './FrameProcessor.ts';
export { DiffusionProcessor, diffusionProcessorFactory } from './DiffusionProcessor.ts';
export { prepareModels } from './ModelCatalog.ts';
export type { FetchImage } from '../native/index.ts';
export { MediaError, InvalidStateError, PipelineError, SdpError, type MediaErrorCode } from './errors.ts';
export { DEFAULT_MEDIA_SETTINGS, type MediaSettings } from './settings.ts';
