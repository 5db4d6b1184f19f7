/**
 * Area B streams: create (with placement on a media node), read, list, update params (validated on
 * the merged params, classified hot/reload, handed to the owning node), status, delete. Routes
 * stay thin; every rule lives here. Failures are ApiErrors from the Area B catalogue.
 *
 * The media node learns who may publish and play through `resolveIngest`/`resolvePlayback`.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import net from 'node:net';
import type { Logger } from 'pino';
import type { Account, RtmpOutputRecord, SoundtrackRecord, Store, StreamRecord, Unsubscribe } from '../store/index.ts';
import { newId, StoreError } from '../store/index.ts';
import { AddressPolicy, BlockedAddressError, normalizeHost } from '../outbound/index.ts';
import { streamError, withoutPaths } from '../errors/index.ts';
import type { LandedInfo, MediaNodeClient, MediaNodeInfo, ParamsUpdate } from './MediaNodeClient.ts';
import { DEFAULT_MEDIA_SETTINGS } from '../media/index.ts';
import { PromptFilter } from './PromptFilter.ts';
import { statusView, type StatusData } from './StreamStatusView.ts';
import { endSession, LIVE_STREAMS_PER_PLAN, STREAMING_ALLOWANCE_SECONDS, streamingUsed } from './StreamLifecycle.ts';
import {
  BETA_MODEL_FAMILY,
  checkParams,
  planUpdate,
  LEGACY_PIPELINE_IDS,
  mergeParams,
  MODELS,
  publicParams,
  type PublicStreamParams,
  type BetaModelId,
  type UpdatePlan,
  type ModelId,
  type ParamIssue,
  type ParamsInput,
  type StreamParams,
} from './StreamParams.ts';

/** PATCH (and the beta prompt route) per account: spec "Limits", 300 a minute, sliding window. */
export const UPDATE_RATE = { max: 300, windowMs: 60_000 } as const;

/**
 * How long a deleted stream's status still answers (OFFLINE, `end_reason: deleted`) before it is
 * 404 like the stream's other routes, ms. Spec "Stream session and webhook lifecycle": DELETE ends
 * the session with reason `deleted`, and after teardown the status endpoint reports OFFLINE; a
 * client that deletes and then polls status, or that checks status on a `stream.ended` webhook
 * (delivered up to 8 times over about 32 minutes), reads that answer rather than a 404 it cannot
 * tell from a wrong id. One hour covers both; the operator setting is DELETED_STREAM_STATUS_TTL.
 */
export const DELETED_STATUS_TTL_MS = 3_600_000;

/**
 * The rate-limited update routes, each with its own budget of UPDATE_RATE:
 * - `patch`: PATCH /v1/streams/{id} (spec: 300 requests a minute);
 * - `prompts`: POST /beta/streams/{id}/prompts (spec: not shown; the same figure).
 */
export type UpdateRoute = 'patch' | 'prompts';

export interface StreamView {
  id: string;
  stream_key: string;
  whip_url: string;
  output_playback_id: string;
  output_stream_url: string;
  gateway_host: string;
  params: PublicStreamParams;
  name: string;
  author: string;
  from_playground: boolean;
  is_smoke_test: boolean;
  created_at: string;
  pipeline: 'streamdiffusion';
  /** Whether the output is recorded (an addition to the spec). */
  record: boolean;
}

export interface CreateInput {
  pipeline?: 'streamdiffusion' | undefined;
  pipeline_id?: string | undefined;
  params?: ParamsInput | undefined;
  pipeline_params?: ParamsInput | undefined;
  name?: string | undefined;
  output_rtmp_url?: string | undefined;
  outputs?: RtmpOutputRecord[] | undefined;
  record?: boolean | undefined;
}

export interface UpdateOutcome {
  stream: StreamView;
  /**
   * The plan of the update as it ran: the stream's processor's own (the engine's planUpdate against
   * the params it runs) when the node handed it one now; else the params module's over the stored
   * params (no processor runs the stream yet; the one built later starts from these params).
   */
  classification: UpdatePlan;
  /** Who planned `classification`: `node` (the stream's processor, as it ran it) or `api`. */
  plannedBy: 'node' | 'api';
  censored: boolean;
  /** The node could not apply it (it keeps the previous params; status shows last_error). */
  nodeError: string | null;
  /** The node holding a timed change (opts.schedule) for its frame; null when none took it (no live stream). */
  scheduledOn: string | null;
}

/**
 * Runner states (reference §2.5, ai-runner `_compute_current_state`):
 * - `OFFLINE`: no live pipeline (never connected, torn down, or ended);
 * - `LOADING`: a publisher is attached and the pipeline has not produced output yet;
 * - `ONLINE`: input and output flowing at healthy rates;
 * - `DEGRADED_INPUT`: no input for 2 s, or input below 15 fps;
 * - `DEGRADED_INFERENCE`: an error in the last 15 s, a restart in the last 60 s, no output for 2 s,
 *   or output below min(10, 0.8 × input fps);
 * - `ERROR`: loading for more than 180 s, or the pipeline the params ask for cannot be built (a
 *   fallback keeps the output flowing; `last_error` says why) until an update that builds.
 */
export interface StreamServiceOptions {
  store: Store;
  media: MediaNodeClient;
  /** PUBLIC_URL: whip_url and output_stream_url are built on it. */
  publicUrl: string;
  logger: Logger;
  filter?: PromptFilter;
  now?: () => number;
  allowances?: typeof STREAMING_ALLOWANCE_SECONDS;
  /** Update rate limit per account; default UPDATE_RATE (benchmarks raise it). */
  updateRate?: { max: number; windowMs: number };
  /** ms a deleted stream's status still reads OFFLINE; default DELETED_STATUS_TTL_MS; 0: 404 at once. */
  deletedStatusTtlMs?: number;
  /**
   * Where an output_rtmp_url may point (the webhooks' SSRF rules). Default: public unicast only.
   * Checked here when the stream is created, and again by the media node at every connection.
   */
  outboundPolicy?: AddressPolicy;
  /** Names of the renditions the media nodes encode (RENDITIONS): what an RTMP output may push. Default the media defaults. */
  renditions?: readonly string[];
}

/** An RTMP output as stored (and sent to the node): the rendition only when one is chosen. */
export function rtmpOutputRecord(o: RtmpOutputRecord): RtmpOutputRecord {
  return { name: o.name, url: o.url, enabled: o.enabled, ...(o.rendition !== undefined ? { rendition: o.rendition } : {}) };
}

const issuesError = (issues: ParamIssue[]) =>
  streamError('STREAMS/INVALID_PARAMS', `${issues[0]?.field ?? 'params'}: ${issues[0]?.message ?? 'invalid'}`, {
    details: { where: 'body', issues: issues.map(({ field, message }) => ({ field, message })) },
  });

export class StreamService {
  readonly #store: Store;
  readonly #media: MediaNodeClient;
  readonly #publicUrl: string;
  readonly #gatewayHost: string;
  readonly #log: Logger;
  readonly #filter: PromptFilter;
  readonly #now: () => number;
  readonly #allowances: typeof STREAMING_ALLOWANCE_SECONDS;
  readonly #outbound: AddressPolicy;
  readonly #rate: { max: number; windowMs: number };
  readonly #deletedStatusTtlMs: number;
  /** Names of the renditions the media nodes encode: what an RTMP output may push. */
  readonly #renditions: readonly string[];

  constructor(opts: StreamServiceOptions) {
    this.#renditions = opts.renditions ?? DEFAULT_MEDIA_SETTINGS.renditions.map((r) => r.name);
    this.#store = opts.store;
    this.#media = opts.media;
    this.#publicUrl = opts.publicUrl.replace(/\/+$/, '');
    this.#gatewayHost = new URL(this.#publicUrl).host;
    this.#log = opts.logger.child({ module: 'StreamService' });
    this.#filter = opts.filter ?? PromptFilter.fromFile();
    this.#now = opts.now ?? Date.now;
    this.#allowances = opts.allowances ?? STREAMING_ALLOWANCE_SECONDS;
    this.#rate = opts.updateRate ?? UPDATE_RATE;
    this.#deletedStatusTtlMs = opts.deletedStatusTtlMs ?? DELETED_STATUS_TTL_MS;
    this.#outbound = opts.outboundPolicy ?? new AddressPolicy();
  }

  /** Checks one of a stream's extra RTMP outputs (`outputs[i]`): its target, and its rendition among those the nodes encode. */
  async checkRtmpOutput(o: RtmpOutputRecord, i: number): Promise<void> {
    await this.checkRtmpTarget(o.url, `outputs[${i}].url`);
    const known = this.#renditions;
    if (o.rendition !== undefined && !known.includes(o.rendition)) {
      const field = `outputs[${i}].rendition`;
      const message = known.length ? `no rendition ${JSON.stringify(o.rendition)}; this server encodes ${known.map((n) => JSON.stringify(n)).join(', ')}` : 'this server encodes no renditions (RENDITIONS=none)';
      throw streamError('REQUEST/INVALID', `${field}: ${message}`, { details: { where: 'body', issues: [{ field, message }] } });
    }
  }

  /** Refuses an RTMP target whose host is, or resolves to, an address we must not dial; `field` names it in the error. */
  async checkRtmpTarget(url: string, field = 'output_rtmp_url'): Promise<void> {
    const refuse = (message: string) => streamError('REQUEST/INVALID', `${field}: ${message}`, { details: { where: 'body', issues: [{ field, message }] } });
    const host = normalizeHost(new URL(url).hostname);
    if (net.isIP(host) === 0 && this.#outbound.isLocalName(host)) throw refuse(`${host} is a local-only name, not a public one`);
    try {
      await this.#outbound.checkHost(host);
    } catch (err) {
      if (err instanceof BlockedAddressError) throw refuse(err.message);
      throw refuse(`${host} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }

  view(s: StreamRecord): StreamView {
    return {
      id: s.id,
      stream_key: s.streamKey,
      whip_url: `${this.#publicUrl}/live/${s.id}/whip`,
      output_playback_id: s.playbackId,
      output_stream_url: `${this.#publicUrl}/live/${s.playbackId}/whep`,
      gateway_host: s.gatewayHost,
      params: publicParams(s.params),
      name: s.name,
      author: s.accountId,
      from_playground: s.fromPlayground,
      is_smoke_test: s.isSmokeTest,
      created_at: s.createdAt,
      pipeline: s.pipeline,
      record: s.record === true,
    };
  }

  /** Filters prompts in place of a params input; true when something was removed. */
  #censor(input: ParamsInput): { input: ParamsInput; censored: boolean } {
    if (input.prompt === undefined) return { input, censored: false };
    const r = this.#filter.prompt(input.prompt);
    return { input: { ...input, prompt: r.value }, censored: r.censored };
  }

  async create(account: Account, body: CreateInput): Promise<{ stream: StreamView; censored: boolean }> {
    if (body.params && body.pipeline_params) {
      throw streamError('REQUEST/INVALID', 'params: send params or the deprecated pipeline_params, not both', { details: { where: 'body', issues: [{ field: 'pipeline_params', message: 'not with params' }] } });
    }
    let input: ParamsInput = { ...(body.params ?? body.pipeline_params ?? {}) };
    if (body.pipeline_id !== undefined) {
      const model = LEGACY_PIPELINE_IDS[body.pipeline_id];
      if (!model) {
        throw streamError('REQUEST/INVALID', `pipeline_id: unknown legacy pipeline id ${JSON.stringify(body.pipeline_id)}`, {
          details: { where: 'body', issues: [{ field: 'pipeline_id', message: `known: ${Object.keys(LEGACY_PIPELINE_IDS).join(', ')}` }] },
        });
      }
      if (input.model_id !== undefined && input.model_id !== model) {
        throw streamError('REQUEST/INVALID', `params.model_id: ${input.model_id} contradicts pipeline_id ${body.pipeline_id} (${model})`, {
          details: { where: 'body', issues: [{ field: 'params.model_id', message: `pipeline_id ${body.pipeline_id} is ${model}` }] },
        });
      }
      input.model_id = model;
    }
    const censor = this.#censor(input);
    input = censor.input;
    const params = mergeParams(null, input);
    const issues = checkParams(params, { faceid: false });
    if (issues.length) throw issuesError(issues);

    if (body.output_rtmp_url) await this.checkRtmpTarget(body.output_rtmp_url);
    for (const [i, o] of (body.outputs ?? []).entries()) await this.checkRtmpOutput(o, i);
    const node = await this.#place(params.model_id);
    const now = new Date(this.#now()).toISOString();
    const record: StreamRecord = {
      id: newId('str'),
      accountId: account.id,
      name: body.name ?? '',
      pipeline: 'streamdiffusion',
      params,
      streamKey: `sk_${randomBytes(24).toString('base64url')}`,
      playbackId: randomBytes(12).toString('hex'),
      outputRtmpUrl: body.output_rtmp_url ?? null,
      ...(body.outputs?.length ? { rtmpOutputs: body.outputs.map(rtmpOutputRecord) } : {}),
      ...(body.record ? { record: true } : {}),
      fromPlayground: false,
      isSmokeTest: false,
      gatewayHost: this.#gatewayHost,
      nodeId: node.id,
      state: 'created',
      createdAt: now,
      updatedAt: now,
      startedAt: null,
      endedAt: null,
      endReason: null,
      lastLiveAt: null,
      deleted: false,
    };
    await this.#store.streams.create(record);
    this.#log.info(`create() | created [streamId:${record.id}] [model:${params.model_id}] [node:${node.id}]`);
    return { stream: this.view(record), censored: censor.censored };
  }

  /** The update rate limit per account (PATCH's; the control WebSocket shares it). */
  get updateRate(): { max: number; windowMs: number } {
    return this.#rate;
  }

  /** The media nodes that can take streams now (what GET /v1/capabilities reports). */
  nodes(): Promise<MediaNodeInfo[]> {
    return this.#media.nodes();
  }

  /** A node that has the model and room; the least loaded wins. */
  async #place(model: ModelId): Promise<MediaNodeInfo> {
    const nodes = await this.#media.nodes();
    const withModel = nodes.filter((n) => n.models.includes(model));
    if (withModel.length === 0) {
      throw streamError('STREAMS/MODEL_UNAVAILABLE', `No media node serves ${model} right now.`, {
        details: { model_id: model, available: [...new Set(nodes.flatMap((n) => n.models))] },
      });
    }
    const free = withModel.filter((n) => n.load < n.capacity).sort((a, b) => a.load / a.capacity - b.load / b.capacity);
    const node = free[0];
    if (!node) throw streamError('STREAMS/NO_CAPACITY', `Every media node serving ${model} is full; try again shortly.`, { details: { model_id: model }, headers: { 'retry-after': '30' } });
    return node;
  }

  /** The account's stream, not deleted; 404 otherwise (another account's stream included). */
  async #own(account: Account, id: string): Promise<StreamRecord> {
    const s = await this.#store.streams.get(id);
    if (!s || s.deleted || s.accountId !== account.id) throw streamError('STREAMS/NOT_FOUND', `No stream ${id} on this account.`, { details: { id } });
    return s;
  }

  async get(account: Account, id: string): Promise<StreamView> {
    return this.view(await this.#own(account, id));
  }

  /** The soundtrack set on one of the account's streams (`PUT …/soundtrack`), or null. */
  async soundtrackOf(account: Account, id: string): Promise<SoundtrackRecord | null> {
    return (await this.#own(account, id)).soundtrack ?? null;
  }

  async list(account: Account, page: { limit: number; cursor?: string | undefined }): Promise<{ data: StreamView[]; next_cursor: string | null }> {
    try {
      const res = await this.#store.streams.list(account.id, { limit: page.limit, cursor: page.cursor ?? null });
      return { data: res.items.map((s) => this.view(s)), next_cursor: res.nextCursor };
    } catch (err) {
      if (err instanceof StoreError && err.code === 'invalid_cursor') {
        throw streamError('REQUEST/INVALID', 'cursor: not a cursor this API returned', { details: { where: 'querystring', issues: [{ field: 'cursor', message: 'unknown cursor' }] }, cause: err });
      }
      throw err;
    }
  }

  /**
   * Counts one update of the caller's own stream `id` against the route's sliding window; 429 with
   * Retry-After when over. PATCH (spec: 300 a minute) and the beta prompt route each have their own
   * budget. The ownership check comes first, so requests for another account's (or an unknown)
   * stream answer 404 and spend nothing.
   */
  async checkUpdateRate(account: Account, id: string, route: UpdateRoute = 'patch'): Promise<void> {
    await this.#own(account, id);
    const { max, windowMs } = this.#rate;
    const r = await this.#store.rateLimits.hit(`streams.${route}:${account.id}`, max, windowMs);
    if (r.allowed) return;
    const retryAfter = Math.max(1, Math.ceil(r.retryAfterMs / 1000));
    const what = route === 'patch' ? 'PATCH updates' : 'prompt submissions';
    throw streamError('STREAMS/RATE_LIMITED', `At most ${max} ${what} per ${windowMs / 1000} s per account; retry in ${retryAfter} s.`, {
      details: { retry_after_seconds: retryAfter, limit: max, window_seconds: windowMs / 1000 },
      headers: { 'retry-after': String(retryAfter) },
    });
  }

  /** Stores `record` and tells the stream's node now (a node that misses it takes it with the next publisher). */
  async #setRecord(stream: StreamRecord, on: boolean): Promise<StreamRecord> {
    const updated = await this.#store.streams.update(stream.id, { record: on, updatedAt: new Date(this.#now()).toISOString() });
    if (!updated || updated.deleted) throw streamError('STREAMS/NOT_FOUND', `No stream ${stream.id} on this account.`, { details: { id: stream.id } });
    if (updated.nodeId) {
      await this.#media.setRecording(updated.nodeId, updated.id, on).catch((err: unknown) => {
        this.#log.warn({ err }, `setRecord() | node did not take it now; it applies at the next ingest [streamId:${stream.id}]`);
        return false;
      });
    }
    this.#log.info(`setRecord() | record ${on ? 'on' : 'off'} [streamId:${stream.id}]`);
    return updated;
  }

  /**
   * PATCH: merges `patch` over the stored params, checks the merged params, stores them and hands
   * the change to the owning node (hot or reload). `faceid` admits ip_adapter.type faceid (the beta
   * route's sdxl-faceid pipeline); a stream that already has it keeps it.
   */
  async update(account: Account, id: string, patch: ParamsInput, opts: { faceid?: boolean; record?: boolean | undefined; schedule?: ParamsUpdate['schedule'] } = {}): Promise<UpdateOutcome> {
    let stream = await this.#own(account, id);
    if (opts.record !== undefined && opts.record !== (stream.record === true)) stream = await this.#setRecord(stream, opts.record);
    const before = stream.params;
    const censor = this.#censor(patch);
    const after = mergeParams(before, censor.input);
    const faceid = opts.faceid === true || (before.ip_adapter?.type === 'faceid' && after.ip_adapter?.type === 'faceid');
    const issues = checkParams(after, { faceid });
    if (issues.length) throw issuesError(issues);
    const classification = planUpdate(before, after);
    if (classification.mode === 'none') return { stream: this.view(stream), classification, plannedBy: 'api', censored: censor.censored, nodeError: null, scheduledOn: null };

    const storedAt = this.#now();
    const updated = await this.#store.streams.update(stream.id, { params: after, updatedAt: new Date(storedAt).toISOString() });
    if (!updated || updated.deleted) throw streamError('STREAMS/NOT_FOUND', `No stream ${id} on this account.`, { details: { id } });
    let nodeError: string | null = null;
    let scheduledOn: string | null = null;
    let ran: UpdatePlan | null = null;
    if (updated.nodeId) {
      // Planned once, here: the node and its engine apply this change as it is.
      const r = await this.#media.updateParams(updated.nodeId, {
        streamId: updated.id,
        change: { target: after, plan: classification },
        storedAt,
        ...(opts.schedule ? { schedule: opts.schedule } : {}),
      });
      nodeError = r.error !== undefined ? withoutPaths(r.error) : null;
      if (r.scheduled === true) scheduledOn = updated.nodeId;
      ran = r.plan ?? null;
    }
    const plan = ran ?? classification;
    this.#log.info(`update() | ${plan.mode} [by:${ran ? 'node' : 'api'}] [streamId:${id}] [hot:${plan.hot.join(',')}] [reload:${plan.reload.join(',')}]`);
    return { stream: this.view(updated), classification: plan, plannedBy: ran ? 'node' : 'api', censored: censor.censored, nodeError, scheduledOn };
  }

  /** Where timed changes land on the nodes (every node's `landed` events). */
  onLanded(handler: (e: LandedInfo) => void): Promise<Unsubscribe> {
    return this.#media.subscribe((e) => {
      if (e.type === 'landed') handler(e);
    });
  }

  /** Drops a timed change a node holds (best effort: false when the node has none by that id). */
  async cancelScheduled(nodeId: string, streamId: string, updateId: string): Promise<boolean> {
    return this.#media.cancelScheduled(nodeId, streamId, updateId).catch(() => false);
  }

  /**
   * The deprecated full-body prompt route: `model_id` names the pipeline variant; params.model_id,
   * when given, must belong to its family (when absent, the variant's family keeps the current
   * model or moves to the variant's default model).
   */
  async submitPrompt(account: Account, id: string, modelId: BetaModelId, params: ParamsInput): Promise<UpdateOutcome> {
    const variant = BETA_MODEL_FAMILY[modelId];
    const stream = await this.#own(account, id);
    const current = stream.params.model_id;
    const model = params.model_id ?? (MODELS[current].family === variant.family ? current : variant.defaultModel);
    if (MODELS[model].family !== variant.family) {
      throw issuesError([{ field: 'params.model_id', message: `${model} is not served by pipeline ${modelId} (${variant.family} models only)` }]);
    }
    return this.update(account, id, { ...params, model_id: model }, { faceid: variant.faceid });
  }

  async delete(account: Account, id: string): Promise<void> {
    let stream = await this.#own(account, id);
    const now = this.#now();
    // CAS loop: a started session ends (`deleted`) with its event; otherwise only the flag moves.
    for (let attempt = 0; attempt < 5; attempt++) {
      if (stream.state === 'started') {
        const status = stream.nodeId ? await this.#media.status(stream.nodeId, stream.id).catch(() => null) : null;
        // Live right now: it was confirmed live until this moment.
        const lastLive = status?.state === 'live' ? now : (Date.parse(stream.lastLiveAt ?? stream.startedAt ?? stream.createdAt) || now);
        if (await endSession(this.#store, stream, 'deleted', lastLive, now, { deleted: true, deletedAt: new Date(now).toISOString() })) break;
      } else {
        const at = new Date(now).toISOString();
        const done = await this.#store.streams.update(stream.id, { deleted: true, deletedAt: at, updatedAt: at }, { fromStates: [stream.state] });
        if (done) break;
      }
      const again = await this.#store.streams.get(id);
      if (!again || again.deleted) break;
      stream = again;
    }
    if (stream.nodeId) await this.#media.endStream(stream.nodeId, stream.id).catch(() => false);
    this.#log.info(`delete() | deleted [streamId:${id}]`);
  }

  // ───────────────────────────── status

  /**
   * The status record; a deleted stream is STREAMS/NOT_FOUND (control sockets close on it). With
   * `recentlyDeleted` (GET /v1/streams/{id}/status), a stream deleted less than `deletedStatusTtlMs`
   * ago reads OFFLINE with `end_reason: deleted` instead (its node is not asked: it dropped the
   * stream); later, or on another account, STREAMS/NOT_FOUND as on every other route.
   */
  async status(account: Account, id: string, opts: { recentlyDeleted?: boolean } = {}): Promise<StatusData> {
    const now = this.#now();
    const gone = opts.recentlyDeleted ? await this.#store.streams.get(id) : null;
    if (gone?.deleted && gone.accountId === account.id) {
      const deletedMs = Date.parse(gone.deletedAt ?? gone.updatedAt);
      if (now - deletedMs < this.#deletedStatusTtlMs) {
        return statusView({ stream: gone, whepUrl: this.view(gone).output_stream_url, node: null, nodeInfo: null, now });
      }
    }
    const stream = await this.#own(account, id);
    const node = stream.nodeId ? await this.#media.status(stream.nodeId, stream.id).catch(() => null) : null;
    const nodes = await this.#media.nodes();
    const nodeInfo = nodes.find((n) => n.id === stream.nodeId) ?? null;
    return statusView({ stream, whepUrl: this.view(stream).output_stream_url, node, nodeInfo, nodes, now });
  }

  // ───────────────────────────── for the media node

  /**
   * WHIP: the stream key must match (else null: 401); deleted streams are unknown; an account
   * whose monthly streaming allowance is used up gets a refusal (402) naming it, and one that
   * already has its plan's number of streams live gets 429 (a reconnect of one of them is fine).
   */
  async resolveIngest(
    streamId: string,
    bearer: string,
  ): Promise<{ streamId: string; params: StreamParams; paramsStoredAt: number; outputRtmpUrl?: string; rtmpDestinations?: RtmpOutputRecord[]; record?: boolean } | { refused: string; status?: 402 | 429 } | null> {
    const s = await this.#store.streams.get(streamId);
    if (!s || s.deleted) return null;
    const a = Buffer.from(s.streamKey);
    const b = Buffer.from(bearer);
    if (a.length !== b.length || !timingSafeEqual(a, b)) return null;
    const account = await this.#store.accounts.get(s.accountId);
    const allowance = account ? this.#allowances[account.plan] : null;
    const maxLive = account ? LIVE_STREAMS_PER_PLAN[account.plan] : null;
    const live = allowance !== null || maxLive !== null ? await this.#store.streams.listByState(['started']) : [];
    if (maxLive !== null && account) {
      const others = live.filter((x) => x.accountId === s.accountId && x.id !== s.id && !x.deleted).length;
      if (others >= maxLive) {
        this.#log.info(`resolveIngest() | refused: live stream limit [streamId:${streamId}] [plan:${account.plan}] [limit:${maxLive}]`);
        return { refused: `the ${account.plan} plan allows ${maxLive} live stream${maxLive === 1 ? '' : 's'} at once; end another stream first`, status: 429 };
      }
    }
    if (allowance !== null) {
      if ((await streamingUsed(this.#store, s.accountId, live, this.#now())) >= allowance) {
        this.#log.info(`resolveIngest() | refused: streaming allowance used up [streamId:${streamId}]`);
        return { refused: `this month's streaming allowance of the ${account?.plan ?? ''} plan (${Math.round(allowance / 60)} min) is used up; it renews on the 1st (UTC)` };
      }
    }
    // The node orders these params against PATCHes that reach it while this lookup runs.
    return {
      streamId: s.id,
      params: s.params,
      paramsStoredAt: Date.parse(s.updatedAt),
      ...(s.outputRtmpUrl ? { outputRtmpUrl: s.outputRtmpUrl } : {}),
      ...(s.rtmpOutputs?.length ? { rtmpDestinations: s.rtmpOutputs } : {}),
      ...(s.record ? { record: true } : {}),
      ...(s.soundtrack ? { soundtrack: s.soundtrack } : {}),
    };
  }

  /** WHEP: any non-deleted stream's playback id (playback ids are unguessable, like Daydream's). */
  async resolvePlayback(playbackId: string): Promise<{ streamId: string; accountId: string; nodeId?: string } | null> {
    const s = await this.#store.streams.getByPlaybackId(playbackId);
    // The owner bounds the viewers waiting for its streams that are not live (media settings); the
    // node that holds the stream is its origin for edges (decision 0030).
    return s && !s.deleted ? { streamId: s.id, accountId: s.accountId, ...(s.nodeId ? { nodeId: s.nodeId } : {}) } : null;
  }

  /**
   * What a stream's outputs carry, by playback id, for the key-less viewer page (the playback id is
   * already the capability to watch): `live`, `slate` (publisher away) or `none`. Unknown or
   * deleted: STREAMS/NOT_FOUND.
   */
  async playbackOutput(playbackId: string): Promise<'live' | 'slate' | 'none'> {
    const s = await this.#store.streams.getByPlaybackId(playbackId);
    if (!s || s.deleted) throw streamError('STREAMS/NOT_FOUND', `No stream plays as ${playbackId}.`, { details: { playback_id: playbackId } });
    const node = s.nodeId ? await this.#media.status(s.nodeId, s.id).catch(() => null) : null;
    return node?.output ?? 'none';
  }
}
