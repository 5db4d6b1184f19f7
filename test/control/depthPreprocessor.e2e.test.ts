/**
 * Live, everything real under the default start (demo models and demo preprocessors written by
 * prepareModels): a stream with a depth ControlNet fed by depth_tensorrt, headless Chromium
 * publishing its fake camera over WHIP, a second Chromium page playing the output over WHEP. The
 * engine says the preprocessor is a demo on CPU (TensorRT is not in this build) and times it.
 */
import t from 'tap';
import { launchChromium } from '../helpers/chromium.ts';
import { startRolesServer, type Json } from '../helpers/rolesServer.ts';
import type { PeerPage } from '../media/harness.ts';

type W = Window & PeerPage;

t.test('a depth ControlNet with depth_tensorrt: Chromium publishes, another page plays the output', { timeout: 180_000 }, async (t) => {
  const { base, api, roles } = await startRolesServer(t, { peerPage: true });
  const created = await api('POST', '/v1/streams', {
    params: {
      model_id: 'stabilityai/sd-turbo',
      prompt: 'a lighthouse',
      width: 384,
      height: 384,
      t_index_list: [20],
      controlnets: [{ model_id: 'thibaud/controlnet-sd21-depth-diffusers', preprocessor: 'depth_tensorrt', conditioning_scale: 0.8, preprocessor_params: { detect_resolution: 280 } }],
    },
  });
  t.equal(created.status, 201, JSON.stringify(created.body.details ?? ''));
  const s = created.body;

  const ctx = await launchChromium(t);
  const pubPage = await ctx.newPage();
  await pubPage.goto(`${base}/peer.html`);
  const pub = await pubPage.evaluate((o) => (window as unknown as W).publish(o), { url: s.whip_url as string, token: s.stream_key as string, codec: 'VP8' as const, width: 320, height: 240 });
  t.equal(pub.status, 201, `WHIP 201 (${pub.status === 201 ? 'ok' : pub.body})`);

  // Until its first processed frame (the models load first) the output is the slate: wait, bounded,
  // for live output from the engine with the depth ControlNet's preprocessor timed in a frame.
  type NodeStatus = { output?: string; pipeline?: Json | null } | undefined;
  const nodeStatus = () => roles.node?.getStream(s.id)?.status() as NodeStatus;
  const liveDeadline = Date.now() + 120_000;
  let live = nodeStatus();
  while (Date.now() < liveDeadline && !(live?.output === 'live' && Number(live.pipeline?.['stageMs']?.['control'] ?? 0) > 0)) {
    await new Promise((r) => setTimeout(r, 100));
    live = nodeStatus();
  }
  t.equal(live?.output, 'live', 'the output is live (not the slate)');

  const viewPage = await ctx.newPage();
  await viewPage.goto(`${base}/peer.html`);
  const play = await viewPage.evaluate((url) => (window as unknown as W).play({ url }), s.output_stream_url as string);
  t.equal(play.status, 201, `WHEP 201 (${play.status === 201 ? 'ok' : play.body})`);
  const frames = await viewPage.evaluate(() => (window as unknown as W).waitFrames(10, 60_000));
  t.ok(frames >= 10, `the viewer decoded ${frames} output frames`);
  const fs = await viewPage.evaluate(() => (window as unknown as W).frameStats());
  t.equal(fs.width, 384, 'at the stream size');
  t.ok(fs.meanLuma > 5, `not a black picture (mean luma ${fs.meanLuma.toFixed(1)})`);

  const engine = (live?.pipeline ?? null) as Json | null;
  t.ok(engine, 'the stream runs the diffusion pipeline');
  t.equal(engine?.['buildError'], null, 'built as asked');
  t.match(engine?.['preprocessors'], [{ preprocessor: 'depth_tensorrt', controlnet: 'thibaud/controlnet-sd21-depth-diffusers', demo: true, providers: ['cpu'] }], 'a demo depth model on cpu, said so');
  t.match(engine?.['preprocessors']?.[0]?.providerNote, /asked for tensorrt; running on cpu/);
  t.ok((engine?.['stageMs']?.['control'] ?? 0) > 0, `the preprocessor's per-frame cost is in the stage timings (${Number(engine?.['stageMs']?.['control']).toFixed(1)} ms)`);
  const st = (await api('GET', `/v1/streams/${s.id}/status`)).body.data;
  t.not(st.state, 'ERROR');
  t.equal(st.demo, true);

  // A hot preprocessor_params change: no restart, frames keep playing.
  const hot = await api('PATCH', `/v1/streams/${s.id}`, { params: { controlnets: [{ model_id: 'thibaud/controlnet-sd21-depth-diffusers', preprocessor: 'depth_tensorrt', conditioning_scale: 0.8, preprocessor_params: { detect_resolution: 140 } }] } });
  t.equal(hot.headers.get('x-params-update'), 'hot');
  const more = await viewPage.evaluate((n) => (window as unknown as W).waitFrames(n, 30_000), frames + 10);
  t.ok(more >= frames + 10, 'output keeps playing');
  t.equal((roles.node?.getStream(s.id)?.status().pipeline as Json | null)?.['restartCount'], 0, 'no reload');
  const scrape = await fetch(`${base}/metrics`);
  const text = await scrape.text();
  t.match(text, /reverie_media_controlnet_preprocessor\{[^}]*preprocessor="depth_tensorrt"[^}]*demo="true"[^}]*\} 1/, '/metrics labels the preprocessor demo');
});
