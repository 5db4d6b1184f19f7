/** What every role of a process is started with (control/Roles.ts): the shared parts. */
import type { Logger } from 'pino';
import type { MediaSettings } from '../media/index.ts';
import type { BlobStore, Store } from '../store/index.ts';
import type { LinkSigner } from './LinkSigner.ts';
import type { Metrics } from './Metrics.ts';

export interface RoleDeps {
  store: Store;
  blobs: BlobStore;
  logger: Logger;
  metrics: Metrics;
  /**
   * Secret an api replica signs the client address of a forwarded WHIP/WHEP request with, and
   * media nodes verify (derived from LINK_SIGNING_SECRET, the same on every process).
   */
  forwardedSecret?: string;
  /** Signs download and playlist links (recordings). */
  links?: LinkSigner;
  now?: () => number;
  /** Media node tuning over the defaults (tests and benchmarks; operators use the config). */
  mediaSettings?: Partial<MediaSettings>;
}
