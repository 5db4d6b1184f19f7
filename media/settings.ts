/**
 * Tuning knobs of the live path, kept out of the public MediaNode options (pion's SettingEngine
 * idea). Every value has its unit and the reason for its default.
 */
export interface MediaSettings {
  /** Bytes. Chrome offers are ~6 KB, OBS ~1 KB; beyond this → 413. */
  maxSdpBytes: number;
  /** Lines in an offer; cheap guard against thousands of m-lines/attributes → 413. */
  maxSdpLines: number;
  /** Output frame rate the encoder is told, fps. */
  outputFps: number;
  /** x264 target bitrate, kbit/s. */
  videoBitrateKbps: number;
  /** Frames between forced IDRs (≈2 s at 30 fps; new viewers also get a forced key unit). */
  keyIntFrames: number;
  /**
   * Frames between VP8 key frames (≈1 s at 30 fps, like the H.264 GOP once HLS's segment-driven
   * IDRs shorten it; those apply to the x264 encoder only).
   */
  vp8KeyIntFrames: number;
  /** libvpx speed of the VP8 branch (-16…16, higher = cheaper): 16 costs about what x264 ultrafast does at 512². */
  vp8CpuUsed: number;
  /** ms; viewer PLI/FIR → forced key unit at most this often. */
  keyUnitMinIntervalMs: number;
  /** ms; PLI to the publisher at most this often (at start, after loss, until the first keyframe). */
  pliMinIntervalMs: number;
  /**
   * ms a packet after a gap waits for it to fill before the gap counts as lost, at least. The wait
   * is sized by the measured round trip so that two NACK retransmissions fit (NackGenerator), from
   * this floor up to `jitterMaxLatencyMs`.
   */
  jitterLatencyMs: number;
  /**
   * ms that wait is at most (WHIP_REORDER_WAIT_MAX_MS): on a long round trip, the stall a lost
   * packet may cost before it is given up (and the frames after it wait for a key frame).
   */
  jitterMaxLatencyMs: number;
  /** NACKs per lost publisher packet at most, each a round trip apart (WHIP_NACK_MAX_RETRIES). */
  nackMaxRetries: number;
  /**
   * Largest share (0–1) of a publisher's received bytes that our NACKs may ask for again
   * (WHIP_NACK_MAX_BITRATE_PCT / 100): a burst of loss does not become a retransmission storm.
   */
  nackMaxBitrateShare: number;
  /** ms without any RTP from the publisher → the WHIP session closes (publisher vanished without DELETE); checked every quarter of it. */
  ingestTimeoutMs: number;
  /** ms a WHEP/WHIP session may take to reach ICE+DTLS connected before it is closed. */
  connectTimeoutMs: number;
  /** ms between `live` heartbeats while a stream outputs frames. */
  heartbeatMs: number;
  /** ms a stream with no publisher and no viewers is kept before it is disposed. */
  idleStreamMs: number;
  /**
   * ms a stream past idleStreamMs is held further while LL-HLS players or RTMP pushes still consume
   * its output (the slate); released as soon as nothing does. Bounds the slate encode of a stream
   * whose publisher never returns.
   */
  idleHoldMaxMs: number;
  /**
   * Connected viewers of all streams on this node (beyond → 503: the node is full). The operator's
   * WHEP_VIEWERS_PER_NODE, by default 500 per core from the measured fan-out cost (control/config.ts).
   */
  maxViewersPerNode: number;
  /** Connected viewers per stream (beyond → 503). Sessions still connecting count below instead. WHEP_VIEWERS_PER_STREAM. */
  maxViewersPerStream: number;
  /**
   * ms an edge keeps pulling a stream from its origin after its last viewer here left (decision
   * 0030): a viewer that reloads finds the relay still running. 0: stop at once. EDGE_LINGER_MS.
   */
  edgeLingerMs: number;
  /** Viewer sessions of one stream that have not connected yet (beyond → 503). WHEP_PENDING_VIEWERS_PER_STREAM. */
  maxPendingViewersPerStream: number;
  /**
   * Viewer sessions from one client address that have not connected yet, across streams (beyond →
   * 429: a per-client limit; Retry-After: until the oldest must have connected or gone).
   * WHEP_PENDING_VIEWERS_PER_ADDRESS.
   */
  maxPendingViewersPerAddress: number;
  /**
   * Viewer sessions (connecting or connected) of one stream that has not had a publisher on this
   * node (beyond → 429; a stream whose publisher is away for a moment is not held to it).
   * Waiting viewers take no node capacity (playback ids are public); this and the next bound what
   * they can hold instead. 20: a watch party waiting for the start, not a crowd that costs the node.
   */
  maxWaitingViewersPerStream: number;
  /**
   * Streams of one account (the stream's owner) that have not had a publisher on this node and
   * that viewers wait for, at once (beyond → 429). 10 = the largest plan's live streams at once below max (pro).
   */
  maxWaitingStreamsPerAccount: number;
  /**
   * Streams that never had a publisher whose slate runs at once on this node (each is one x264
   * encode of a still frame at slateFps while a viewer is connected). Beyond, waiting viewers see
   * nothing until the publisher's first frame. 8: a few percent of a core in all at 512², 10 fps.
   */
  maxWaitingSlates: number;
  /** WHIP POSTs per client address per minute (beyond → 429; OBS retries a refused publish every few seconds). */
  whipPerAddressPerMinute: number;
  /** WHEP POSTs per client address per minute (beyond → 429). WHEP_PER_ADDRESS_PER_MINUTE. */
  whepPerAddressPerMinute: number;
  /** WHEP POSTs per playback id per minute from all addresses (beyond → 429): ≈ 10 viewers joining a second. WHEP_PER_PLAYBACK_PER_MINUTE. */
  whepPerPlaybackPerMinute: number;
  /** RTP payload size limit for our H.264 and VP8 packetizers, bytes (fits 1280 MTU with SRTP/ext headroom). */
  rtpMaxPayload: number;
  /** avdec_h264 threads; 1 keeps decode 1-in-1-out (frame threading delays output by N frames). */
  decoderThreads: number;
  /**
   * A decoder that has taken frames for this long without giving one out is rebuilt (and a key
   * frame asked for), ms. A decode takes milliseconds; seen once under load: a decoder that took
   * 780 frames and gave none, the stream stuck in `connecting` with its publisher connected.
   */
  decoderStallMs: number;
  /** Serve LL-HLS (/hls/{playbackId}/index.m3u8) for every live stream; costs one AAC encode per stream. */
  hlsEnabled: boolean;
  /** LL-HLS part target, ms (PART-TARGET). */
  hlsPartTargetMs: number;
  /**
   * LL-HLS PART-HOLD-BACK, ms: the latency players aim for behind the live edge. null: 3 ×
   * hlsPartTargetMs. Behind a cache that hands a part to waiting players late (nginx: up to
   * 500 ms), raise it by that much, or players run dry and hls.js adds a second for good.
   * HLS_PART_HOLD_BACK_MS.
   */
  hlsPartHoldBackMs: number | null;
  /** HLS segment target, ms: the packager asks for an IDR when a segment reaches it (shortens the GOP for WHEP too). */
  hlsSegmentTargetMs: number;
  /** Complete segments kept in memory per stream (sliding window). */
  hlsWindowSegments: number;
  /**
   * Smaller encodes of every stream's output beside the full one, for thin links: LL-HLS offers
   * them in a multivariant playlist (/hls/{playbackId}/master.m3u8). Each costs one scaled x264
   * encode per live stream. RENDITIONS (`name=scale@kbps,…`; `none`: the full encode only).
   */
  renditions: RenditionSpec[];
  /** AAC bitrate for HLS/RTMP, bit/s. */
  aacBitrateBps: number;
  /**
   * Run the AAC encoder (when an output wants it) even while the publisher's Opus is only
   * silence frames. Off: it starts at the first packet that carries sound, and the outputs fill
   * silence until then (the same bytes, without the ≈ 1.5 % of a core per stream). On only to
   * measure the difference (`npm run bench -- recording`).
   */
  aacForSilence: boolean;
  /**
   * Publisher audio a soundtrack's mix holds before it starts taking it, ms (again after it ran
   * dry): Opus arrives in 20 ms packets, unevenly; a mix that ate them as they came would drop
   * the publisher's sound whenever a packet was late. Adds this much delay to the publisher's
   * audio on outputs with a soundtrack. Default 60 (three packets).
   */
  soundtrackJitterMs: number;
  /**
   * Longest a frame of a stream whose params follow the publisher's audio (audio_mappings) waits
   * for the audio of its capture time to be decoded, ms: that audio travels in an Opus packet
   * that leaves up to 20 ms after it, so without the wait a sound would change the frame after
   * the one it belongs to. Adds up to this much latency to those streams only. Default 40.
   */
  audioMappingWaitMs: number;
  /** ffmpeg binary for the RTMP push. */
  ffmpegPath: string;
  /**
   * Nice values of the decoders' and encoders' streaming threads (Linux). Below the JS thread
   * (0), which receives every stream's packets and answers ICE consent checks; decoders above
   * encoders, since a decoder that skips input loses its references until the next key frame,
   * while an encoder that skips a raw frame loses nothing but that frame.
   */
  decoderNice: number;
  encoderNice: number;
  /**
   * Slate frames a second while no live frame comes (decision 0011). 10 keeps every frame inside an
   * LL-HLS part (≤ 200 ms) so the HLS timeline stays continuous; a static frame costs x264 little.
   */
  slateFps: number;
  /**
   * ms without a live output frame before the slate starts (while someone watches). Below the HLS
   * packager's 1 s stall limit, so a publisher's drop does not break the segment timeline.
   */
  slateAfterMs: number;
  /** ms a frame may sit in a working processor before the slate covers it (a slow model is not a stall). */
  slateBusyMs: number;
  /** ms after a stream closed (and its closing neighbours) until freed memory goes back to the kernel (MemoryTrim). */
  memoryTrimAfterCloseMs: number;
  /** ms between memory trims while the node runs (0: only after closes). */
  memoryTrimIntervalMs: number;
}

/** One rendition: `scale` of the stream's size (each side, rounded to even pixels) at `bitrateKbps`. */
export interface RenditionSpec {
  /** Its name in URLs (/hls/{playbackId}/{name}/index.m3u8) and status: [a-z0-9-], 1–16 chars. */
  name: string;
  /** 0.1–0.9 of the stream's width and height. */
  scale: number;
  bitrateKbps: number;
}

export const DEFAULT_MEDIA_SETTINGS: MediaSettings = {
  maxSdpBytes: 32 * 1024,
  maxSdpLines: 1000,
  outputFps: 30,
  videoBitrateKbps: 1500,
  keyIntFrames: 60,
  vp8KeyIntFrames: 30,
  vp8CpuUsed: 16,
  keyUnitMinIntervalMs: 500,
  pliMinIntervalMs: 500,
  jitterLatencyMs: 100,
  // 500 ms: two retries at 150 ms round trip (2 × 1.25 × 150 + margins ≈ 400 ms) fit.
  jitterMaxLatencyMs: 500,
  // Retries stop earlier when the wait above ends; 5 covers 3 % loss of the retransmissions too.
  nackMaxRetries: 5,
  // A 25 % share repairs 3 % loss ten times over and bounds a storm to 1.25× the stream's bitrate.
  nackMaxBitrateShare: 0.25,
  ingestTimeoutMs: 10_000,
  connectTimeoutMs: 15_000,
  heartbeatMs: 5_000,
  idleStreamMs: 60_000,
  idleHoldMaxMs: 30 * 60_000,
  // A node made without the process config (tests, embedding): 2 cores' worth (config derives it from the cores).
  maxViewersPerNode: 1000,
  maxViewersPerStream: 1000,
  maxPendingViewersPerStream: 50,
  edgeLingerMs: 5_000,
  maxPendingViewersPerAddress: 8,
  maxWaitingViewersPerStream: 20,
  maxWaitingStreamsPerAccount: 10,
  maxWaitingSlates: 8,
  whipPerAddressPerMinute: 30,
  whepPerAddressPerMinute: 60,
  whepPerPlaybackPerMinute: 600,
  rtpMaxPayload: 1100,
  decoderThreads: 1,
  decoderStallMs: 4000,
  hlsEnabled: true,
  hlsPartTargetMs: 200,
  hlsPartHoldBackMs: null,
  hlsSegmentTargetMs: 1000,
  hlsWindowSegments: 6,
  // Half size at 300 kb/s (0.15 bit per pixel at 256×256, 30 fps): with 128 kb/s of AAC and the
  // fMP4 framing, ≈ 470 kb/s, which a 600 kb/s link carries with room for a player's estimate.
  renditions: [{ name: 'half', scale: 0.5, bitrateKbps: 300 }],
  aacBitrateBps: 128_000,
  aacForSilence: false,
  soundtrackJitterMs: 60,
  audioMappingWaitMs: 40,
  ffmpegPath: 'ffmpeg',
  decoderNice: 5,
  encoderNice: 10,
  slateFps: 10,
  slateAfterMs: 500,
  slateBusyMs: 3000,
  memoryTrimAfterCloseMs: 2000,
  memoryTrimIntervalMs: 60_000,
};
