/**
 * Plain data shapes kept by the store. They carry no behaviour: the parts that own them
 * (control/, songs/, webhooks/, media/) hold the rules. Times are ISO 8601 strings (UTC)
 * unless the name ends in `Ms` (milliseconds since the Unix epoch).
 */

/** Account plans (spec, Area A Usage). `internal` is for our own tools and smoke tests. */
/**
 * Whether `id` has the shape of a record id with this prefix (`str_…`, `sng_…`, `whk_…`: the
 * prefix, `_`, then 1–64 base64url characters). Ids come from URLs; one of any other shape names
 * no record, and repositories answer null for it without building a store key from it (in Redis
 * `str:bykey:…` is another record's key, and reading it as a hash would fail).
 */
export function isRecordId(prefix: 'str' | 'sng' | 'whk' | 'dlv', id: string): boolean {
  return id.length <= prefix.length + 65 && id.startsWith(`${prefix}_`) && /^[A-Za-z0-9_-]+$/.test(id.slice(prefix.length + 1));
}

import type { ModelId, StreamParams } from '../native/params/index.ts';

export type Plan = 'anonymous' | 'free' | 'songs' | 'pro' | 'max' | 'internal';
export const PLANS = ['anonymous', 'free', 'songs', 'pro', 'max', 'internal'] as const satisfies readonly Plan[];

export interface Account {
  id: string; // acc_<id>
  plan: Plan;
  name: string;
  createdAt: string;
  /** The admission rule of the account's streams that set none of their own (absent or null: none). */
  admission?: AdmissionRule | null;
}

/** What an admission rule gates: `publish` (WHIP) and `read` (WHEP and LL-HLS). */
export type AdmissionAction = 'publish' | 'read';

/**
 * Who may publish or play beyond the stream key and the playback id:
 * - `hook`: we POST the request to the operator's HTTPS `url`; a 2xx admits;
 * - `jwt`: the client brings a JWT signed by `publicKey` (PEM) or by a key of the JWKS at `jwksUrl`
 *   (exactly one of the two), whose `sub` is the playback id.
 * `actions` are the actions it gates; the others are admitted as without a rule.
 */
export type AdmissionRule =
  | { type: 'hook'; url: string; actions: AdmissionAction[] }
  | { type: 'jwt'; publicKey: string | null; jwksUrl: string | null; actions: AdmissionAction[] };

/** An API key as stored: only the SHA-256 digest of the secret is kept; the secret is shown once. */
export interface ApiKeyRecord {
  /** Lowercase hex SHA-256 of the whole key string. */
  digest: string;
  accountId: string;
  /** The first characters of the key (`rv_live_ab12`), for listing keys without revealing them. */
  preview: string;
  createdAt: string;
}

/**
 * Song lifecycle (spec "States and transitions", Area A):
 * - `queued`: in line, `position` 1 is next;
 * - `rendering`: a worker holds its render job;
 * - `done`: every take rendered, files stored;
 * - `failed`: gave up; the month's count was given back.
 */
export type SongState = 'queued' | 'rendering' | 'done' | 'failed';

export interface ErrorRecord {
  error: string;
  message: string;
}

export interface TakeRecord {
  n: 1 | 2;
  seed: number;
  /** Seconds, as rendered (whole bars). */
  duration: number;
  /** 200 peaks in [0, 1]. */
  waveform: number[];
  /** Blob keys of the files. */
  mp3Key: string;
  wavKey: string;
  /** Blob key of the Standard MIDI File (takes rendered before MIDI existed have none). */
  midiKey?: string;
  /** Stems, when the song asked for them: one zip blob whose members are stored uncompressed. */
  stems?: TakeStems | null;
}

/** The stem names, in zip order: dry instrument groups, then the shared reverb and delay returns. */
export type StemName = 'drums' | 'bass' | 'chords' | 'lead' | 'effects';

export interface TakeStems {
  /** Blob key of the zip of the five stem WAVs. */
  zipKey: string;
  /** Where each stem's WAV bytes lie inside the zip (stored, not deflated), so one can be served alone. */
  members: Record<StemName, { offset: number; size: number }>;
}

/** One section of the plan a song was rendered with, as the API echoes it. */
export interface SongSectionRecord {
  name: string;
  /** First bar (0-based) and length in bars. */
  start_bar: number;
  bars: number;
  /** 0–1. */
  energy: number;
  /** Extra style words for this section ('' when none). */
  style: string;
}

export interface SongRecord {
  id: string; // sng_<id>
  accountId: string;
  status: SongState;
  prompt: string;
  /** Seconds asked for (10–120). */
  duration: number;
  bpm: number;
  key: string | null;
  loop: boolean;
  seed: number;
  variations: 1 | 2;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  error: ErrorRecord | null;
  takes: TakeRecord[];
  /** Render progress 0–1 while `rendering`. */
  progress: number;
  /** The month (`YYYY-MM`, UTC) this song was counted against; given back there on failure. */
  usageMonth: string;
  /** Render attempts so far. */
  attempts: number;
  /** The engine's plan for this song (genre, sections…), opaque to the store. */
  plan: unknown;
  /** Whether stems were asked for (absent on songs made before stems existed: false). */
  stems?: boolean;
  /** The section plan used (asked for, or planned by the engine). */
  sections?: SongSectionRecord[];
  /** Takes whose MP3 is being written progressively in this render (`songs/<id>/<n>.mp3.part`). */
  streaming?: number[];
}

/**
 * Stream session state (spec "Stream session and webhook lifecycle"):
 * - `created`: no ingest yet (the client may never connect);
 * - `started`: ingest connected and the pipeline produced its first output frame;
 * - `ended`: timed out, deleted or out of credits; a reconnect moves it back to `started`.
 */
export type StreamState = 'created' | 'started' | 'ended';

/** One extra RTMP destination of a stream, as the API set it. */
export interface RtmpOutputRecord {
  name: string;
  url: string;
  enabled: boolean;
  /** A rendition of the stream's output to push (the node's RENDITIONS); absent: the full encode. */
  rendition?: string;
}
export type StreamEndReason = 'timeout' | 'deleted' | 'credits_exhausted';

/** A song's take as a stream's soundtrack (`PUT …/soundtrack`), as the node plays it. */
export interface SoundtrackRecord {
  songId: string;
  take: 1 | 2;
  /** Blob key of the take's WAV. */
  wavKey: string;
  /** ms epoch of the take's first sample ("now" is stored as the time of the PUT). */
  startAt: number;
  loop: boolean;
  /** dB. */
  gainDb: number;
  /** dB (≤ 0) applied to the publisher's audio while the song sounds. */
  duckPublisherDb: number;
}

export interface StreamRecord {
  id: string; // str_<id>
  accountId: string;
  name: string;
  pipeline: 'streamdiffusion';
  /** Full params with defaults filled in (merged and checked by the stream service, so `model_id` is one the API admits). */
  params: StreamParams<ModelId>;
  streamKey: string;
  playbackId: string;
  outputRtmpUrl: string | null;
  /** RTMP destinations besides outputRtmpUrl (absent on records made before they existed). */
  rtmpOutputs?: RtmpOutputRecord[];
  /** Record the output (absent on records made before recording existed: off). */
  record?: boolean;
  /** The song mixed into the output audio (absent or null: none). */
  soundtrack?: SoundtrackRecord | null;
  /** The stream's own admission rule (absent or null: the account's, if any). */
  admission?: AdmissionRule | null;
  fromPlayground: boolean;
  isSmokeTest: boolean;
  gatewayHost: string;
  /** The media node that owns the stream, or null if unplaced. */
  nodeId: string | null;
  state: StreamState;
  createdAt: string;
  updatedAt: string;
  startedAt: string | null;
  endedAt: string | null;
  endReason: StreamEndReason | null;
  /** Last moment the stream was confirmed live. */
  lastLiveAt: string | null;
  /** Set by DELETE; a deleted stream is never listed nor started again. */
  deleted: boolean;
  /**
   * When DELETE landed (absent on records deleted before it was kept: their `updatedAt` stands in).
   * Its status reads OFFLINE for a while after (StreamService `deletedStatusTtlMs`).
   */
  deletedAt?: string;
  /**
   * Webhook events this stream has emitted (absent on records made before it was kept: 0). Each
   * event's `data.sequence` is the count after it, so a stream's events number 1, 2, 3… in order.
   */
  eventSeq?: number;
  /** The id of the `stream.started` event of the current (or last) session, which its `stream.ended` follows. */
  startedEventId?: string;
}

export interface WebhookEndpointRecord {
  id: string; // whk_<id>
  accountId: string;
  url: string;
  events: string[];
  name: string;
  /** Full `whsec_…` secret; only the control plane decides when to show it. */
  secret: string;
  isActive: boolean;
  consecutiveFailures: number;
  /** Deliveries per second at most, across all workers; null or absent: no limit. */
  rateLimit?: number | null;
  createdAt: string;
  updatedAt: string;
}

/** Delivery states (spec "Webhook delivery"). */
export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

export interface WebhookDeliveryRecord {
  id: string; // dlv_<id>
  endpointId: string;
  accountId: string;
  eventId: string;
  eventType: string;
  streamId: string | null;
  /** The exact JSON body sent (the signed bytes). */
  payload: string;
  status: DeliveryStatus;
  attempts: number;
  responseStatus: number | null;
  responseBody: string | null;
  error: string | null;
  createdAt: string;
  updatedAt: string;
  lastAttemptAt: string | null;
  nextAttemptAt: string | null;
  /**
   * The event whose delivery to the same endpoint must be finished (succeeded or failed) before
   * this one is sent: a `stream.ended` names its session's `stream.started`. Absent: none.
   */
  afterEventId?: string | null;
}

/**
 * Why a send of a delivery was made:
 * - `scheduled`: the first send or a retry of the schedule (at most 8 in all);
 * - `resend`: `POST …/deliveries/{id}/resend`;
 * - `recover`: `POST /v1/webhooks/{id}/recover`.
 */
export type AttemptTrigger = 'scheduled' | 'resend' | 'recover';

/** One send of one delivery, as its attempts log keeps it (deleted with the delivery). */
export interface WebhookAttemptRecord {
  deliveryId: string;
  /** The delivery's send count after this send (1 for the first). */
  attempt: number;
  trigger: AttemptTrigger;
  startedAt: string;
  /** Round trip of the request, ms (until the response body was read, or until it failed). */
  durationMs: number;
  /** HTTP status, or null when no response came (timeout, connection, TLS, blocked address). */
  responseStatus: number | null;
  /** The response body's first 1 KiB (UTF-8), or null without a response. */
  responseBody: string | null;
  /** Why the send failed (`http_status: 500`, `timeout: …`), or null on a 2xx. */
  error: string | null;
}

/** A page of results, newest first; `nextCursor` is opaque and null on the last page. */
export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

export interface PageRequest {
  /** 1–100. */
  limit: number;
  cursor?: string | null;
}
