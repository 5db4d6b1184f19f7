/**
 * worker_threads entry: renders takes posted by RenderPool, off the main event loop. Messages:
 * in `{ id, plan, n, options? }`; out `{ id, type: 'progress', fraction }`, `{ id, type: 'mp3chunk', chunk }`,
 * `{ id, type: 'free' }` (this thread's part of the take is done, LAME's tail runs on: the pool may
 * post the next take), `{ id, type: 'done', result }` (WAV and MP3 bytes transferred, not copied),
 * `{ id, type: 'error', message, stack }`. Two takes may be in flight: one rendering, one finishing.
 */
import { parentPort } from 'node:worker_threads';
import { EncoderHost } from './EncoderHost.ts';
import { renderTakeHere } from './Renderer.ts';
import type { SongPlan } from './SongPlanner.ts';

export interface RenderRequest {
  id: number;
  plan: SongPlan;
  n: 1 | 2;
  options?: { stems?: boolean; stemsPath?: string; progressive?: boolean };
}

const port = parentPort;
if (!port) throw new Error('RenderWorker.ts must run in a worker thread');
// The encoder host is forked now, while this thread holds no audio buffers (see EncoderHost).
EncoderHost.prewarm();

port.on('message', (msg: RenderRequest) => {
  let last = -1;
  renderTakeHere(msg.plan, msg.n, (fraction) => {
    // At most 100 progress messages per take.
    const f = Math.floor(fraction * 100);
    if (f !== last) {
      last = f;
      port.postMessage({ id: msg.id, type: 'progress', fraction });
    }
  }, {
    stems: msg.options?.stems === true,
    onThreadFree: () => port.postMessage({ id: msg.id, type: 'free' }),
    ...(msg.options?.stemsPath !== undefined ? { stemsPath: msg.options.stemsPath } : {}),
    ...(msg.options?.progressive ? { onMp3Chunk: (chunk: Buffer) => port.postMessage({ id: msg.id, type: 'mp3chunk', chunk }) } : {}),
  }).then(
    (result) => {
      const transfer: ArrayBuffer[] = [];
      // Buffers that own their whole ArrayBuffer can move without a copy.
      for (const b of [result.wav, result.mp3, result.midi, ...(result.stems?.zip ? [result.stems.zip] : [])]) {
        if (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength && b.buffer instanceof ArrayBuffer) transfer.push(b.buffer);
      }
      port.postMessage({ id: msg.id, type: 'done', result }, transfer);
    },
    (err: unknown) => {
      const e = err instanceof Error ? err : new Error(String(err));
      port.postMessage({ id: msg.id, type: 'error', message: e.message, stack: e.stack });
    },
  );
});
