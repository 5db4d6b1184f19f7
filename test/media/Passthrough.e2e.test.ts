/**
 * Streams with nothing to process (skip_diffusion, no enabled image processor) build no processor
 * and run I420 end to end; turning a processor on builds it and switches the decoder to RGB in
 * place, turning it off goes back. A WHEP viewer alone never builds a processor. The publisher is
 * OBS-like (libdatachannel, H.264, no candidates, no trickle); the viewer is Chromium.
 */
import t from 'tap';
import { createProcessorChain } from '../../native/index.ts';
import { ImageChainProcessor, imageChainsIdle, type FrameProcessorFactory, type LiveParams } from '../../media/index.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { patchStream, STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from './harness.ts';
import { until } from '../helpers/until.ts';

type W = Window & PeerPage;

const CANNY: LiveParams = { image_postprocessing: { enabled: true, processors: [{ type: 'canny', enabled: true, params: { low_threshold: 100, high_threshold: 200 } }] } };
const NONE: LiveParams = { image_postprocessing: { enabled: true, processors: [] } };

t.test('no processing → no processor, I420 end to end; a processor is built when params need one and left when they stop', { timeout: 120_000 }, async (t) => {
  let built = 0;
  const factory: FrameProcessorFactory = Object.assign(
    async (params: LiveParams) => {
      built++;
      return new ImageChainProcessor(createProcessorChain as ConstructorParameters<typeof ImageChainProcessor>[0], params);
    },
    { passthrough: imageChainsIdle },
  );
  const srv = await startMediaServer(t, { params: { width: 256, height: 256, ...NONE }, createProcessor: factory });
  const ctx = await launchChromium(t, { fakeMedia: false });
  const viewer = await ctx.newPage();
  await viewer.goto(`${srv.baseUrl}/peer.html`);
  const played = await viewer.evaluate((url) => (window as unknown as W).play({ url }), srv.whepUrl);
  t.equal(played.status, 201, 'a viewer joins before the publisher');
  t.equal(srv.node.status(STREAM_ID)?.processor, 'none', 'a viewer alone builds no processor');
  t.equal(built, 0);

  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 150 });
  const p = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source });
  t.equal(p.status, 201, `OBS-like WHIP POST → 201 (${p.body})`);
  // The viewer has watched the slate since it joined: wait for the publisher's frames on the output
  // before counting live frames (its decoder exists from the publish on, before any frame).
  let s = await until('the stream is live', () => srv.node.status(STREAM_ID), (v) => v?.state === 'live', 20_000);
  t.ok((await viewer.evaluate(() => (window as unknown as W).waitFrames(20, 30_000))) >= 20, 'the viewer decodes frames');
  const plain = await viewer.evaluate(() => (window as unknown as W).frameStats());
  s = srv.node.status(STREAM_ID);
  t.equal(s?.processor, 'none', 'still no processor while nothing needs one');
  t.equal(s?.pixelFormat, 'I420', 'the decoder hands I420 frames straight to the encoder');
  t.equal(built, 0, 'the factory was never called');

  patchStream(srv.node, STREAM_ID, CANNY);
  s = await until('processor ready', () => srv.node.status(STREAM_ID), (v) => v?.processor === 'ready', 20_000);
  t.equal(built, 1, 'canny on: one processor is built');
  t.equal(s?.pixelFormat, 'RGB', 'the decoder switched to RGB in place');
  await viewer.evaluate(() => (window as unknown as W).waitFrames(15, 10_000));
  const edges = await until('canny frames', () => viewer.evaluate(() => (window as unknown as W).frameStats()), (v) => v.extremeFraction > 0.85, 15_000);
  t.ok(edges.extremeFraction > plain.extremeFraction + 0.2, `canny output is near-binary (${edges.extremeFraction.toFixed(3)} vs ${plain.extremeFraction.toFixed(3)})`);
  const decoderRestartsBefore = s?.decoderRestarts ?? 0;

  patchStream(srv.node, STREAM_ID, NONE);
  s = await until('I420 again', () => srv.node.status(STREAM_ID), (v) => v?.pixelFormat === 'I420', 10_000);
  const back = await until('plain frames', () => viewer.evaluate(() => (window as unknown as W).frameStats()), (v) => v.extremeFraction < edges.extremeFraction - 0.2, 15_000);
  t.ok(back.extremeFraction < edges.extremeFraction - 0.2, 'canny off: frames pass unchanged again');
  t.equal(s?.processor, 'ready', 'the built processor is kept for the stream (a later toggle costs nothing)');
  t.equal(s?.decoderRestarts, decoderRestartsBefore, 'no decoder was rebuilt for the switches');
  t.equal(built, 1, 'and no second one is built');
});
