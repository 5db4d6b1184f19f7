/**
 * AppPipeline over our GStreamer addon: samples arrive in order through the appsink callback,
 * bus errors reach the owner once, close is final, and — the reason the addon exists — idle
 * pipelines hold no libuv threadpool thread, so file I/O and WebCrypto (werift's DTLS) keep
 * working however many bins are waiting for input.
 */
import { webcrypto } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import pino from 'pino';
import t from 'tap';
import { AppPipeline } from '../../../media/gst/AppPipeline.ts';
import { PipelineError } from '../../../media/errors.ts';

const logger = pino({ level: 'silent' });
const BYTES = 'appsrc name=src is-live=true format=bytes caps="application/x-test" ! queue ! appsink name=sink sync=false max-buffers=100 drop=false';

t.test('samples arrive in push order, each as its own Buffer', { timeout: 20_000 }, async (t) => {
  const got: string[] = [];
  let done!: () => void;
  const all = new Promise<void>((r) => (done = r));
  const bin = new AppPipeline({
    launch: BYTES,
    what: 'test',
    logger,
    onSample: (buf) => {
      got.push(buf.toString());
      if (got.length === 50) done();
    },
  });
  t.teardown(() => bin.close());
  for (let i = 0; i < 50; i++) bin.push(Buffer.from(`sample-${i}`));
  await all;
  t.same(got, Array.from({ length: 50 }, (_, i) => `sample-${i}`));
  t.equal(bin.samples, 50);
  t.equal(bin.pushed, 50);
});

t.test('a pipeline error reaches onError once and names the element', { timeout: 20_000 }, async (t) => {
  const errors: string[] = [];
  let failed!: () => void;
  const failure = new Promise<void>((r) => (failed = r));
  // 4×4 in, 8×8 out with nothing that scales: negotiation fails on the first buffer.
  const bin = new AppPipeline({
    launch: 'appsrc name=src is-live=true format=time caps="video/x-raw,format=RGB,width=4,height=4,framerate=30/1" ! videoconvert ! video/x-raw,width=8,height=8 ! appsink name=sink',
    what: 'mismatch',
    logger,
    onSample: () => t.fail('no sample expected'),
    onError: (message) => {
      errors.push(message);
      failed();
    },
  });
  t.teardown(() => bin.close());
  bin.push(Buffer.alloc(4 * 4 * 3));
  await failure;
  bin.push(Buffer.alloc(4 * 4 * 3));
  t.equal(errors.length, 1);
  t.match(errors[0], /src|not-negotiated|negotiat/i, 'the message says what failed');
  t.equal(bin.error, errors[0]);
});

t.test('a description that does not build throws PipelineError with the cause', async (t) => {
  t.throws(() => new AppPipeline({ launch: 'appsrc name=src ! no-such-element ! appsink name=sink', what: 'bad', logger, onSample: () => undefined }), PipelineError);
  t.throws(() => new AppPipeline({ launch: 'fakesrc ! fakesink', what: 'no appsrc', logger, onSample: () => undefined }), PipelineError);
});

t.test('close is idempotent, stops delivery, and push after close throws', { timeout: 20_000 }, async (t) => {
  let samples = 0;
  const bin = new AppPipeline({ launch: BYTES, what: 'test', logger, onSample: () => samples++ });
  bin.close();
  bin.close();
  t.ok(bin.closed);
  t.throws(() => bin.push(Buffer.from('x')), /closed/);
  t.equal(samples, 0);
});

t.test('idle pipelines hold no threadpool thread: fs and WebCrypto still complete', { timeout: 30_000 }, async (t) => {
  // 24 bins waiting for input: with a blocking pull per bin (the old binding) these took every
  // thread of the default pool of 4, and the operations below never completed.
  const bins = Array.from({ length: 24 }, () => new AppPipeline({ launch: BYTES, what: 'idle', logger, onSample: () => undefined }));
  t.teardown(() => bins.forEach((b) => b.close()));
  const started = performance.now();
  const bounded = <T>(p: Promise<T>, what: string) =>
    Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} did not complete in 5 s`)), 5_000))]);
  const file = await bounded(readFile(new URL(import.meta.url)), 'readFile');
  t.ok(file.length > 0, 'fs read completes');
  const key = await bounded(webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify']), 'generateKey');
  t.ok(key.privateKey, 'WebCrypto key generation completes (what DTLS needs)');
  const reads = await bounded(Promise.all(Array.from({ length: 8 }, () => readFile(new URL(import.meta.url)))), 'parallel reads');
  t.equal(reads.length, 8, 'eight parallel reads complete');
  t.ok(performance.now() - started < 5_000);
});
