/**
 * Area B's domain: live streams. The stream service (create, read, update params, status, delete),
 * the lifecycle supervisor (live/offline/ended, sessions and usage), the prompt filter, clips and
 * RTMP destinations, admission rules (hooks and JWTs that gate publishers and viewers), live control (WebSocket updates, timed and beat-locked changes, tokens), what
 * this deployment can serve, and the media-node plumbing: the client interface with its in-process
 * and bus implementations, the agent a media node answers the bus with, the dead-node sweeper, and
 * the scale-out wiring of those parts.
 *
 * It uses `store/`, `media/`'s entry, `webhooks/`' address policy, the params module
 * (`native/params/`) and the error catalogue (`errors/`); never `control/`, which keeps HTTP
 * (routes, schemas of bodies, error replies), the CLI and process wiring.
 */
export { ADMISSION_DEFAULTS, AdmissionGate, type AdmissionSettings } from './AdmissionGate.ts';
export { AdmissionService, type AdmissionDecision, type AdmissionRuleInput, type AdmissionRuleView, type AdmissionSource, type AdmissionView } from './AdmissionService.ts';
export { describeCapabilities, CapabilitiesSchema } from './Capabilities.ts';
export { CLIPS_PER_MINUTE, ClipService } from './ClipService.ts';
export { ControlTokens } from './ControlTokens.ts';
export { InProcessMediaNodeClient } from './InProcessMediaNodeClient.ts';
export type { MediaNodeClient, MediaNodeInfo } from './MediaNodeClient.ts';
export { PLAYLIST_LINK_TTL_S, RecordingService } from './RecordingService.ts';
export { SlateImageService, type SlateImageView } from './SlateImageService.ts';
export { RtmpOutputService } from './RtmpOutputService.ts';
export { SoundtrackService, type SoundtrackInput, type SoundtrackView } from './SoundtrackService.ts';
export { mediaNodeId, scaleOutStreams, type ScaleOutStreams } from './ScaleOut.ts';
export { CONTROL_LIMITS, StreamControl, type ControlEvent, type Tempo } from './StreamControl.ts';
export { StreamLifecycle, type LifecycleClock, type StreamLifecycleOptions } from './StreamLifecycle.ts';
export { BETA_MODEL_IDS, ParamsInputSchema, StreamParamsSchema } from './StreamParams.ts';
export { DELETED_STATUS_TTL_MS, StreamService, type UpdateOutcome } from './StreamService.ts';
export { runnerState, statusView, type RunnerState, type StatusData } from './StreamStatusView.ts';
