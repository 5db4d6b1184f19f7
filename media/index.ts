/**
 * Public API of the media node: WHIP ingest → decode → frame processor → encode once → WHEP
 * viewers, LL-HLS (/hls/{playbackId}/index.m3u8) and an optional RTMP push. The control plane
 * creates one MediaNode per process, registers its routes on the fastify app, and listens for
 * `started` / `live` / `ended`.
 */
export { MediaNode, DEFAULT_CAPACITY, type AdmissionRequest, type AdmissionVerdict, type ClientInfo, type ClipResult, type IngestGrant, type IngestRefusal, type MediaNodeEvents, type MediaNodeOptions, type PlaybackTarget } from './MediaNode.ts';
export { PUBLIC_ROUTE, WHIP_POST, WHIP_WHEP_CORS } from './WhipWhepRoutes.ts';
export { EDGE_HEADER, FORWARDED_HEADER, forwardedFor } from './NodeSignatures.ts';
export { registerMediaRoutes } from './MediaRoutes.ts';
export { turnCredential, type TurnConfig, type TurnCredential } from './webrtc/IceServers.ts';
export { DEFAULT_UDP_RECV_BUFFER_BYTES, udpRecvBufferCap } from './webrtc/PeerTransport.ts';
export type { ParamsTransition, ScheduledParams } from './stream/ParamsSchedule.ts';
export type { EndedInfo, LiveInfo, LiveStream, LiveStreamState, LiveStreamStatus, StartedInfo } from './stream/LiveStream.ts';
export type { ParamsLanding } from './stream/ParamsLandings.ts';
export type { Vp8BranchStatus } from './webrtc/Vp8Branch.ts';
export { STAGE_BUCKETS_S, type StageStats, type StageTotals } from './StageTimer.ts';
export type { ReaderContext, ReaderFactory, ReaderStatus, StreamReader } from './StreamReader.ts';
export { StreamHub } from './stream/StreamHub.ts';
export { WhepOutput, type WhepOutputStats } from './webrtc/WhepOutput.ts';
export { HlsOutput } from './hls/HlsOutput.ts';
export type { VideoCodec } from './webrtc/Sdp.ts';
export type { IngestStats, SessionCloseReason } from './webrtc/WhipSession.ts';
export type { HlsPackagerStats } from './hls/HlsPackager.ts';
export { CLIP_MAX_SECONDS } from './hls/ClipBuffer.ts';
export * from './hls/RecordingFiles.ts';
export { SLATE_IMAGE_MAX_SIDE, SLATE_PAD_RGB, slateImageKey } from './stream/SlateImage.ts';
export type { RecordingWriterStats } from './hls/RecordingWriter.ts';
export { recordingRuns, remuxRecordingMp4 } from './hls/RecordingMp4.ts';
export type { RtmpPushState, RtmpPushStatus } from './rtmp/RtmpPush.ts';
export { redactRtmpUrl, type OutboundPolicy } from './rtmp/RtmpRelay.ts';
export { MAX_RTMP_DESTINATIONS, PRIMARY_RTMP, RtmpOutputs, type RtmpDestination, type RtmpDestinationStatus } from './rtmp/RtmpOutputs.ts';
export { SOUNDTRACK_SAMPLE_RATE, type SoundtrackSpec, type SoundtrackState, type SoundtrackStatus } from './stream/Soundtrack.ts';
export { AudioFeatures, HOP_SAMPLES, type AudioHop } from './stream/AudioFeatures.ts';
export type { AudioMappingStatus } from './stream/AudioMappings.ts';
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
  type LiveParams,
} from './stream/FrameProcessor.ts';
export { diffusionProcessorFactory } from './stream/DiffusionProcessor.ts';
export { prepareModels } from './ModelCatalog.ts';
export type { FetchImage } from '../native/index.ts';
export { MediaError, InvalidStateError, PipelineError, SdpError, type MediaErrorCode } from './errors.ts';
export { DEFAULT_MEDIA_SETTINGS, type MediaSettings, type RenditionSpec } from './settings.ts';
