/**
 * A stream's own slate image: what its outputs show while the publisher is away, instead of the
 * greyed last frame. The API takes it (an http(s) URL fetched through the same outbound address
 * policy as webhooks, or a `data:` URL), decodes it once through the process's bounded
 * ImageDecoder (images/: byte, pixel, slot and time caps), and stores what it decoded, re-encoded
 * by us as a plain PNG of at most SLATE_IMAGE_MAX_SIDE px a side with no metadata, in the shared
 * blob store (`slates/<streamId>/image.png`, with `meta.json` beside it), where whichever node
 * holds the stream reads it. The client's bytes are not stored: a node only ever decodes a file we
 * wrote (and does so once per picture and stream size, not per viewer). Nothing is sent to the
 * node: it looks at the file while it builds slates.
 */
import type { Logger } from 'pino';
import { ImageBusyError, ImageRejectedError, type ImageDecoder } from '../images/index.ts';
import { SLATE_IMAGE_MAX_SIDE, SLATE_PAD_RGB, slateImageKey, type FetchImage } from '../media/index.ts';
import type { Account, BlobStore, Store, StreamRecord } from '../store/index.ts';
import { streamError } from '../errors/index.ts';

/** A download taking longer is abandoned, ms. */
const FETCH_TIMEOUT_MS = 5000;
/** Where slate images were stored before the API normalised them: the client's bytes. */
const LEGACY_IMAGE_FILE = 'image';

export interface SlateImageView {
  /** What was set: the http(s) URL, or `data:` for an inline image; null when none. */
  image_url: string | null;
  /** Bytes stored (the normalised PNG, not what the client sent); 0 when none. */
  size: number;
  updated_at: string | null;
}

interface Meta {
  imageUrl: string;
  size: number;
  updatedAt: string;
}

export interface SlateImageServiceOptions {
  store: Store;
  blobs: BlobStore;
  /** The SSRF-safe fetch (webhooks' client); without it only `data:` URLs are taken. */
  fetchImage?: FetchImage;
  /** The process's decoder for client images (its caps bound what `set` takes). */
  images: ImageDecoder;
  logger: Logger;
  now?: () => number;
}

export class SlateImageService {
  readonly #o: SlateImageServiceOptions;
  readonly #log: Logger;
  readonly #now: () => number;

  constructor(opts: SlateImageServiceOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'SlateImageService' });
    this.#now = opts.now ?? Date.now;
  }

  async #own(account: Account, streamId: string): Promise<StreamRecord> {
    const s = await this.#o.store.streams.get(streamId);
    if (!s || s.deleted || s.accountId !== account.id) throw streamError('STREAMS/NOT_FOUND', `No stream ${streamId} on this account.`, { details: { id: streamId } });
    return s;
  }

  async get(account: Account, streamId: string): Promise<SlateImageView> {
    await this.#own(account, streamId);
    const meta = await this.#readMeta(streamId);
    if (!meta) return { image_url: null, size: 0, updated_at: null };
    return { image_url: meta.imageUrl, size: meta.size, updated_at: meta.updatedAt };
  }

  /**
   * Fetches (or takes) the image, decodes it, stores our normalised copy. A bad image is the
   * client's 400 naming `image_url`; every decode slot taken is a 503 with Retry-After.
   */
  async set(account: Account, streamId: string, imageUrl: string): Promise<SlateImageView> {
    await this.#own(account, streamId);
    const bytes = await this.#load(imageUrl);
    const stored = await this.#store(streamId, bytes).catch((err: unknown) => {
      if (err instanceof ImageRejectedError) throw invalid(err.message);
      if (err instanceof ImageBusyError) {
        throw streamError('SERVICE/UNAVAILABLE', 'Every image decoder is busy; try again shortly.', { headers: { 'retry-after': String(err.retryAfterS) }, cause: err });
      }
      throw err;
    });
    const shown = imageUrl.startsWith('data:') ? 'data:' : imageUrl;
    const meta: Meta = { imageUrl: shown, size: stored.png.length, updatedAt: new Date(this.#now()).toISOString() };
    // The image first (#store): a node that sees it before the meta only shows it a moment earlier.
    await this.#writeMeta(streamId, meta);
    this.#log.info(`set() | slate image stored [streamId:${streamId}] [sent:${bytes.length}] [stored:${stored.png.length}] [size:${stored.width}x${stored.height}]`);
    return { image_url: meta.imageUrl, size: meta.size, updated_at: meta.updatedAt };
  }

  /**
   * Slate images stored before the API normalised them (`slates/<id>/image`: the client's own
   * bytes, which nodes no longer read) become our normalised `image.png` through the same bounded
   * decoder; one the decoder now refuses (a bomb, a BMP) is removed with its meta, so the API never
   * reports a picture the slate cannot show. Run once at api start; several replicas may run it
   * together (each step is idempotent). Returns what it did.
   */
  async migrateLegacy(): Promise<{ converted: number; removed: number }> {
    let converted = 0;
    let removed = 0;
    for (const streamId of await this.#o.blobs.folders('slates')) {
      const legacy = `slates/${streamId}/${LEGACY_IMAGE_FILE}`;
      const bytes = await this.#o.blobs.get(legacy);
      if (!bytes) continue;
      try {
        const stored = await this.#store(streamId, bytes);
        const meta = await this.#readMeta(streamId);
        if (meta) await this.#writeMeta(streamId, { ...meta, size: stored.png.length });
        await this.#o.blobs.delete(legacy);
        converted++;
      } catch (err) {
        // A refused image is dropped for good; anything else (every slot busy, a store error)
        // leaves it for the next start.
        if (!(err instanceof ImageRejectedError)) {
          this.#log.warn({ err }, `migrateLegacy() | stored slate image left for the next start [streamId:${streamId}]`);
          continue;
        }
        this.#log.warn(`migrateLegacy() | stored slate image refused, removed [streamId:${streamId}] [reason:${(err as Error).message}]`);
        await this.deleteAll(streamId);
        removed++;
      }
    }
    if (converted + removed > 0) this.#log.info(`migrateLegacy() | done [converted:${converted}] [removed:${removed}]`);
    return { converted, removed };
  }

  /** Removes the image (the slate goes back to the greyed last frame). */
  async clear(account: Account, streamId: string): Promise<void> {
    await this.#own(account, streamId);
    await this.deleteAll(streamId);
  }

  /** With the stream. */
  async deleteAll(streamId: string): Promise<void> {
    await this.#o.blobs.deletePrefix(`slates/${streamId}/`);
  }

  /** Normalises the image (the bounded decoder) and writes our PNG where nodes read it. */
  async #store(streamId: string, bytes: Buffer) {
    const stored = await this.#o.images.normalise(bytes, SLATE_IMAGE_MAX_SIDE, SLATE_PAD_RGB);
    await this.#o.blobs.put(slateImageKey(streamId), stored.png);
    return stored;
  }

  async #readMeta(streamId: string): Promise<Meta | null> {
    const raw = await this.#o.blobs.get(`slates/${streamId}/meta.json`);
    return raw ? (JSON.parse(raw.toString('utf8')) as Meta) : null;
  }

  async #writeMeta(streamId: string, meta: Meta): Promise<void> {
    await this.#o.blobs.put(`slates/${streamId}/meta.json`, Buffer.from(JSON.stringify(meta)));
  }

  async #load(url: string): Promise<Buffer> {
    let bytes: Buffer;
    if (url.startsWith('data:')) {
      const comma = url.indexOf(',');
      if (comma < 0 || !/;base64$/.test(url.slice(0, comma))) throw invalid('a data: URL must be base64 (data:image/png;base64,…)');
      bytes = Buffer.from(url.slice(comma + 1), 'base64');
    } else {
      if (!this.#o.fetchImage) throw invalid('this server cannot fetch images: send a data: URL');
      bytes = await this.#o.fetchImage(url, { maxBytes: this.#o.images.limits.maxBytes, timeoutMs: FETCH_TIMEOUT_MS }).catch((err: unknown) => {
        throw invalid(`the image could not be fetched: ${(err as Error).message}`);
      });
    }
    return bytes; // empty and over-size: refused by the decoder
  }
}

function invalid(message: string) {
  return streamError('REQUEST/INVALID', `image_url: ${message}`, { details: { where: 'body', issues: [{ field: 'image_url', message }] } });
}
