/**
 * A reader of a stream's output (docs/decisions/0028-stream-hub.md). Every output — WHEP viewers,
 * LL-HLS, RTMP pushes, and the next ones (an edge relay to another node, a second rendition) —
 * registers with its stream's hub as a reader and takes the tracks it wants; the hub fans them out
 * and knows no protocol. A reader is made by the hub (`StreamHub.add`), closed by it with the
 * stream, and reaches its stream only through the context it was made with.
 *
 * Tracks (each optional: a reader implements the ones it takes):
 * - `video`: the output's H.264 access units, encoded once per stream (live frames and the slate);
 * - `frame`: the raw frames the encoder takes, for readers that encode on their own (VP8);
 * - `rendition`: the access units of the stream's smaller encodes (settings `renditions`), each with
 *   the `video` track's key frames exactly, while some reader `wantsRenditions`;
 * - `opus`: the output audio as Opus RTP (the publisher's, or the soundtrack's mix);
 * - `aac`: the output audio as AAC-LC frames, encoded only while some reader `wantsAac`.
 */
import type { Frame } from './Frame.ts';
import type { EncodedAccessUnit } from './gst/EncoderBin.ts';

/** What every reader shows in its stream's status: the status view lists readers without knowing them. */
export interface ReaderStatus {
  /** What the reader is (`whep`, `hls`, `rtmp`, …): several readers may share a kind. */
  kind: string;
  /** Someone consumes its output now (the slate runs for them; the node holds the stream). */
  watched: boolean;
  /** How many consume it: viewers, players of the last 30 s, running pushes, a recording. */
  consumers: number;
}

/** What a reader may ask of its stream. The hub makes one per reader. */
export interface ReaderContext {
  readonly streamId: string;
  /** Asks the output's H.264 encoder for a key unit (a new viewer, segment or push starts on one). */
  requestKeyUnit(): void;
  /** Asks the publisher for a key frame (a decoder that lost its references recovers on one). */
  requestSourceKeyframe(): void;
  /** The output's RTP time (90 kHz) of an output time (ms on the node's monotonic clock): one clock for every reader. */
  rtpTimestamp(ptsMs: number): number;
  /** Its demand changed (`watched`, `holds`, `wantsAac`, `wantsOpus`): the stream syncs its encoders and idle timer. */
  changed(): void;
  /** An error the stream reports as its `lastError` (the hub's one `error` event). */
  error(message: string): void;
}

export interface StreamReader {
  /** Unique within its stream (`whep`, `hls`, `rtmp`, `edge:<node>`…). */
  readonly name: string;
  /** Someone consumes its output now: the slate runs while any reader is watched. */
  readonly watched: boolean;
  /** It keeps the stream from idling while it has sessions, even unconnected ones (WHEP viewers). Default false. */
  readonly holds?: boolean;
  /** It takes AAC now: the stream runs its AAC encoder while any reader does. Default false. */
  readonly wantsAac?: boolean;
  /** It takes the soundtrack's mix as Opus now (viewers with audio): the mix's Opus encoder runs while any reader does. Default false. */
  readonly wantsOpus?: boolean;
  /** It takes the renditions now: their encoders run while any reader does. Default false. */
  readonly wantsRenditions?: boolean;
  /** One H.264 access unit; `slate`: the slate's, not the publisher's. */
  video?(au: EncodedAccessUnit, slate: boolean): void;
  /** One access unit of the rendition `name` (its key frames are the `video` track's). */
  rendition?(name: string, au: EncodedAccessUnit, slate: boolean): void;
  /** One raw frame at `ptsMs` on the output timeline, as the H.264 encoder takes it. */
  frame?(frame: Frame, ptsMs: number): void;
  /** One Opus RTP packet; `encoderDelayMs`: how much earlier than its RTP time its sound entered our encoder (0: the publisher's own). */
  opus?(rtp: Buffer, encoderDelayMs: number): void;
  /** One AAC-LC frame (raw, no ADTS) placed at `atMs` on the node's monotonic clock. */
  aac?(frame: Uint8Array, atMs: number): void;
  /** Whether AAC frames come now (false: the reader fills silence where it needs sound). */
  aacRunning?(running: boolean): void;
  /** A publisher attached (it may replace one that left). */
  publisherAttached?(): void;
  /** The publisher left; `watched`: some reader still consumes the output (the slate follows). */
  publisherLeft?(watched: boolean): void;
  status(): ReaderStatus;
  /** Stops it for good; a promise settles once what it writes is complete (a recording's last segment). */
  close(): void | Promise<void>;
}

/** Makes a reader with its context (the hub calls it once, at `add`). */
export type ReaderFactory<R extends StreamReader = StreamReader> = (ctx: ReaderContext) => R;
