/**
 * A live stream and a viewer's namespace behind one emulated link, for the renditions tests:
 *
 *   here ── clean veth ── srv ── clean veth ── pub   `reverie serve` (defaults: RENDITIONS half) and an
 *                          ║                          OBS-like publisher (stamped H.264, 512², 30 fps)
 *                          ╚══ impaired (20 ms each way) ══ view   where a viewer's Chromium runs
 *
 * The node is known by its address on the viewer's link; the test's own namespace reaches it over
 * the clean veth (a viewer here is a viewer on a clean path). `link` is srv → view (`ab`) and back.
 */
import { createLab, type Lab } from './netns.ts';
import type { ImpairedLink } from './impairedLink.ts';
import { stampedH264 } from './h264Source.ts';
import { startObsPublishers } from './obsPublisher.ts';
import { startServerProcess, type ServerProcess } from './serverProcess.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface ThinLinkLab {
  lab: Lab;
  link: ImpairedLink;
  server: ServerProcess;
  /** http://<node on the viewer's link>:8080 */
  origin: string;
  stream: { id: string; whip_url: string; stream_key: string; output_stream_url: string; output_playback_id: string };
}

/** Builds lab `id`, starts the server and a live stream with its publisher connected. */
export async function startThinLinkLab(t: Teardown, id: number): Promise<ThinLinkLab> {
  const lab = await createLab(t, id, ['srv', 'pub', 'view']);
  await lab.link({ ns: null, addr: lab.ip(0, 1) }, { ns: 'srv', addr: lab.ip(0, 2) });
  await lab.link({ ns: 'srv', addr: lab.ip(1, 1) }, { ns: 'pub', addr: lab.ip(1, 2) });
  const link = await lab.impairedLink({ ns: 'srv', addr: lab.ip(2, 1) }, { ns: 'view', addr: lab.ip(2, 2) }, { delayMs: 20 });
  await lab.run('pub', ['ip', 'route', 'add', 'default', 'via', lab.ip(1, 1, false)]);
  await lab.run('view', ['ip', 'route', 'add', 'default', 'via', lab.ip(2, 1, false)]);
  await lab.routeFromHere(lab.ip(0, 2, false));
  const node = lab.ip(2, 1, false);
  const server = await startServerProcess(t, { lab, ns: 'srv', env: { HOST: '0.0.0.0', PORT: '8080', PUBLIC_URL: `http://${node}:8080`, WEBRTC_INTERFACES: node } });
  const created = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'thin link', skip_diffusion: true } });
  if (created.status !== 201) throw new Error(`stream not created: ${created.status} ${JSON.stringify(created.body)}`);
  const stream = created.body as ThinLinkLab['stream'];
  const pubs = startObsPublishers(t, { netns: lab.ns('pub') });
  const p = await pubs.publish({ url: stream.whip_url, token: stream.stream_key, source: await stampedH264({ size: 512, frames: 150 }) });
  if (p.status !== 201) throw new Error(`WHIP answered ${p.status}: ${p.body}`);
  await pubs.waitState(p.id, 'connected', 20_000);
  return { lab, link, server, origin: `http://${node}:8080`, stream };
}
