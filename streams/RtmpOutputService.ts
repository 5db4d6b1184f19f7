/**
 * A stream's RTMP destinations beyond the spec's `output_rtmp_url` (`outputs`, up to 4): set as
 * a whole list (`PUT …/outputs`; each enabled or disabled), applied live on the stream's node (an
 * unchanged destination keeps its connection), and read back with each push's own state. Every
 * URL passes the same outbound address rules as `output_rtmp_url` when set, and again at every
 * connection the node makes.
 */
import type { Logger } from 'pino';
import { PRIMARY_RTMP, redactRtmpUrl, type RtmpDestinationStatus } from '../media/index.ts';
import type { Account, RtmpOutputRecord, Store, StreamRecord } from '../store/index.ts';
import { streamError } from '../errors/index.ts';
import type { MediaNodeClient } from './MediaNodeClient.ts';
import { rtmpOutputRecord, type StreamService } from './StreamService.ts';

/** A destination as the API shows it. */
export interface RtmpOutputView {
  name: string;
  /** The stream key (last path segment) is shown as `…`. */
  url: string;
  enabled: boolean;
  /** The rendition pushed (null: the full encode). */
  rendition: string | null;
  /** `disabled`, `idle` (no publisher), or the push's `connecting` / `live` / `reconnecting`. */
  state: 'disabled' | 'idle' | 'connecting' | 'live' | 'reconnecting' | 'closed';
  reconnects: number;
  live_since: number | null;
  last_error: string | null;
}

export interface RtmpOutputServiceOptions {
  store: Store;
  media: MediaNodeClient;
  streams: StreamService;
  logger: Logger;
}

export class RtmpOutputService {
  readonly #o: RtmpOutputServiceOptions;
  readonly #log: Logger;

  constructor(opts: RtmpOutputServiceOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'RtmpOutputService' });
  }

  async #own(account: Account, id: string): Promise<StreamRecord> {
    const s = await this.#o.store.streams.get(id);
    if (!s || s.deleted || s.accountId !== account.id) throw streamError('STREAMS/NOT_FOUND', `No stream ${id} on this account.`, { details: { id } });
    return s;
  }

  async set(account: Account, id: string, outputs: RtmpOutputRecord[]): Promise<RtmpOutputView[]> {
    const stream = await this.#own(account, id);
    for (const [i, o] of outputs.entries()) await this.#o.streams.checkRtmpOutput(o, i);
    const list = outputs.map(rtmpOutputRecord);
    const updated = await this.#o.store.streams.update(stream.id, { rtmpOutputs: list, updatedAt: new Date().toISOString() });
    if (!updated) throw streamError('STREAMS/NOT_FOUND', `No stream ${id} on this account.`, { details: { id } });
    if (stream.nodeId) {
      // Stored first: a node that misses this (restarting) gets the list with the next publisher.
      await this.#o.media.setRtmpDestinations(stream.nodeId, stream.id, list).catch((err: unknown) => {
        this.#log.warn({ err }, `set() | node did not take the outputs now; they apply at the next ingest [streamId:${stream.id}]`);
        return false;
      });
    }
    this.#log.info(`set() | outputs set [streamId:${stream.id}] [count:${list.length}] [enabled:${list.filter((o) => o.enabled).length}]`);
    return this.#views(updated);
  }

  async list(account: Account, id: string): Promise<RtmpOutputView[]> {
    return this.#views(await this.#own(account, id));
  }

  /** output_rtmp_url (read-only here, named `output_rtmp_url`) first, then the stream's outputs, with live state. */
  async #views(stream: StreamRecord): Promise<RtmpOutputView[]> {
    const node = stream.nodeId ? await this.#o.media.status(stream.nodeId, stream.id).catch(() => null) : null;
    const live = new Map<string, RtmpDestinationStatus>((node?.rtmpOutputs ?? []).map((d) => [d.name, d]));
    const all = [...(stream.outputRtmpUrl ? [{ name: PRIMARY_RTMP, url: stream.outputRtmpUrl, enabled: true }] : []), ...(stream.rtmpOutputs ?? [])];
    return all.map((o) => {
      const push = live.get(o.name)?.push ?? null;
      return {
        name: o.name,
        url: redactRtmpUrl(o.url),
        enabled: o.enabled,
        rendition: ('rendition' in o ? o.rendition : undefined) ?? null,
        state: !o.enabled ? 'disabled' : (push?.state ?? 'idle'),
        reconnects: push?.reconnects ?? 0,
        live_since: push?.liveSince ?? null,
        last_error: push?.lastError ?? null,
      };
    });
  }
}
