/**
 * Streams a file that another process is still appending to (a take's MP3 while it is encoded),
 * from its start, until `isComplete(bytesSent)` says the whole file has been sent. It keeps its own
 * descriptor, so the writer may delete the partial file once the final one is published.
 *
 * The writer may be another machine on a shared directory (scale-out), where file-change
 * notifications do not cross hosts, so it looks for new bytes every `pollMs` (default 50 ms) when
 * it has caught up, and gives up after `maxWaitMs` without growth (default 60 s).
 */
import { open, type FileHandle } from 'node:fs/promises';
import { Readable } from 'node:stream';

export interface GrowingFileOptions {
  path: string;
  /** Resolves true when the file is finished and `sent` bytes are all of it; false to keep following; throws to abort. */
  isComplete: (sent: number) => Promise<boolean>;
  pollMs?: number;
  maxWaitMs?: number;
  chunkBytes?: number;
}

export function growingFileStream(o: GrowingFileOptions): Readable {
  const pollMs = o.pollMs ?? 50;
  const maxWaitMs = o.maxWaitMs ?? 60_000;
  const buf = Buffer.alloc(o.chunkBytes ?? 64 * 1024);
  let fh: FileHandle | null = null;
  let offset = 0;
  let idleSince = Date.now();
  let timer: NodeJS.Timeout | null = null;
  const stream = new Readable({
    read() {
      void pump();
    },
    destroy(err, cb) {
      if (timer) clearTimeout(timer);
      const h = fh;
      fh = null;
      (h ? h.close() : Promise.resolve()).then(() => cb(err), () => cb(err));
    },
  });
  const pump = async (): Promise<void> => {
    try {
      fh ??= await open(o.path, 'r');
      const { bytesRead } = await fh.read(buf, 0, buf.length, offset);
      if (stream.destroyed) return;
      if (bytesRead > 0) {
        offset += bytesRead;
        idleSince = Date.now();
        stream.push(Buffer.from(buf.subarray(0, bytesRead)));
        return;
      }
      if (await o.isComplete(offset)) {
        stream.push(null);
        return;
      }
      if (Date.now() - idleSince > maxWaitMs) throw new Error(`file stopped growing [path:${o.path}] [bytes:${offset}]`);
      timer = setTimeout(() => void pump(), pollMs);
    } catch (err) {
      stream.destroy(err as Error);
    }
  };
  return stream;
}
