/**
 * Many streams on one node, and more than it can carry (a load suite: `npm run test:load` runs
 * these files one at a time, after the other tests, so nothing else competes for the cores).
 *
 * The node is a real `reverie serve` with the defaults (only its port, data directory and the
 * loopback interface are set: no UV_THREADPOOL_SIZE, no tuning); publishers are OBS-like
 * (libdatachannel, 512² H.264 at 30 fps and ≈1.5 Mb/s, each from its own loopback address),
 * streams are processors only (skip_diffusion).
 */
import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers, type ObsPublishers } from '../helpers/obsPublisher.ts';
import { freePort } from '../helpers/net.ts';
import { startServerProcess, type ServerProcess } from '../helpers/serverProcess.ts';

interface Sample {
  state: string;
  input: number;
  output: number;
  session: string;
  /** The publisher's video packets so far, as the node counts them. */
  lost: number;
  received: number;
  /** Why the session ended, when OFFLINE. */
  endReason: string | undefined;
  /** Output frames since the session started, and when the sample was taken (ms, monotonic). */
  framesOut: number;
  at: number;
}

async function node(t: Test, env: Record<string, string> = {}): Promise<ServerProcess> {
  const port = await freePort();
  return startServerProcess(t, { env: { PORT: String(port), HOST: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1', ...env } });
}

/** `n` streams, each with a publisher; `size` is the output (the publishers send 512²). */
async function streams(t: Test, server: ServerProcess, pubs: ObsPublishers, n: number, size = 512) {
  const source = await stampedH264({ size: 512, frames: 300 });
  const made: { id: string; publisher: string }[] = [];
  for (let i = 0; i < n; i++) {
    const r = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: `load ${i}`, skip_diffusion: true, width: size, height: size } });
    if (r.status !== 201) throw new Error(`create ${i}: ${r.status} ${JSON.stringify(r.body)}`);
    const s = r.body as { id: string; whip_url: string; stream_key: string };
    const p = await pubs.publish({ url: s.whip_url, token: s.stream_key, source, httpFrom: `127.0.0.${10 + i}` });
    if (p.status !== 201) throw new Error(`publish ${i}: ${p.status} ${p.body}`);
    made.push({ id: s.id, publisher: p.id });
  }
  t.pass(`${n} OBS-like publishers attached`);
  return made;
}

interface StatusData {
  state: string;
  end_reason?: string;
  frames_out?: number;
  request_id: string;
  inference_status: { input_fps: number; output_fps: number };
  gateway_status: { ingest_metrics: { stats: { track_stats: { type: string; packets_lost: number; packets_received: number }[] } } };
}

async function sample(server: ServerProcess, id: string): Promise<Sample> {
  const at = performance.now();
  const d = ((await server.api('GET', `/v1/streams/${id}/status`)).body as { data: StatusData }).data;
  const video = d.gateway_status.ingest_metrics.stats.track_stats.find((s) => s.type === 'video');
  return { state: d.state, input: d.inference_status.input_fps, output: d.inference_status.output_fps, session: d.request_id, lost: video?.packets_lost ?? 0, received: video?.packets_received ?? 0, endReason: d.end_reason, framesOut: d.frames_out ?? 0, at };
}

/** Status of every stream every 2 s for `seconds`. */
async function watch(server: ServerProcess, ids: string[], seconds: number): Promise<Sample[][]> {
  const rows: Sample[][] = ids.map(() => []);
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    const tick = Date.now();
    const all = await Promise.all(ids.map((id) => sample(server, id)));
    all.forEach((s, i) => rows[i]?.push(s));
    await new Promise((r) => setTimeout(r, Math.max(0, 2000 - (Date.now() - tick))));
  }
  return rows;
}

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const quantile = (xs: number[], q: number) => sorted(xs)[Math.min(xs.length - 1, Math.floor(q * xs.length))] ?? 0;
const median = (xs: number[]) => quantile(xs, 0.5);

t.test('8 OBS-like publishers on one node under the defaults: all ONLINE, input and output at 30 fps for 30 s', { timeout: 240_000 }, async (t) => {
  const server = await node(t);
  const pubs = startObsPublishers(t);
  const made = await streams(t, server, pubs, 8);
  await new Promise((r) => setTimeout(r, 6000)); // the publishers' first key frames (OBS sends one every 2 s)
  const rows = await watch(server, made.map((m) => m.id), 30);
  rows.forEach((samples, i) => {
    const inputs = samples.map((s) => s.input);
    const outputs = samples.map((s) => s.output);
    t.ok(samples.every((s) => s.state === 'ONLINE'), `stream ${i}: ONLINE in all ${samples.length} samples (${[...new Set(samples.map((s) => s.state))].join(',')})`);
    // Status fps is a 1 s window: one sample can catch a stall of the 2-core host. 90 % of samples
    // at 28 or more is what "30 fps for 30 s" means here; none may fall below 24.
    t.ok(quantile(inputs, 0.1) >= 28 && Math.min(...inputs) >= 24, `stream ${i}: input fps p10 ${quantile(inputs, 0.1)}, min ${Math.min(...inputs)}`);
    // Output is judged by its frame counter over the whole window (the 1 s status window reads 27
    // or 31 as frames land either side of its edge): 28 of the publisher's 30 a second at least,
    // and no 1 s window below 24.
    const first = samples[0] as Sample;
    const last = samples.at(-1) as Sample;
    const rate = (1000 * (last.framesOut - first.framesOut)) / Math.max(1, last.at - first.at);
    t.ok(rate >= 28 && Math.min(...outputs) >= 24, `stream ${i}: output ${rate.toFixed(1)} fps over ${((last.at - first.at) / 1000).toFixed(0)} s (1 s windows: p10 ${quantile(outputs, 0.1)}, min ${Math.min(...outputs)})`);
    t.equal(new Set(samples.map((s) => s.session)).size, 1, `stream ${i}: one publisher session throughout`);
  });
});

t.test('overload: more publishers than the node can encode stay attached, report true rates, share output evenly, and recover', { timeout: 300_000 }, async (t) => {
  const server = await node(t, { MEDIA_CAPACITY: '64' });
  const pubs = startObsPublishers(t);
  // More than the cores encode, not more than the one JS thread reads: 12 publishers (the packets
  // of 12) whose streams scale up to 768² (the codec work of ≈ 27 at 512²). 24 publishers at 512²
  // did this on most days; on a slow one the JS thread fell behind for good, and then no receive
  // buffer helps: small ones drop key frames, large ones delay ICE consent answers past their
  // timeout (decision 0017).
  const n = 12;
  const made = await streams(t, server, pubs, n, 768);
  await new Promise((r) => setTimeout(r, 8000));
  const rows = await watch(server, made.map((m) => m.id), 30);
  const outputs = rows.map((samples) => median(samples.map((s) => s.output)));
  const inputs = rows.map((samples) => median(samples.map((s) => s.input)));
  // Packets lost while watched, per stream: what the kernel dropped for want of receive buffer
  // (the JS thread reads every stream's packets and is late under overload; decision 0017).
  const lossPct = rows.map((samples) => {
    const first = samples[0] as Sample;
    const last = samples.at(-1) as Sample;
    const lost = last.lost - first.lost;
    return (100 * lost) / Math.max(1, lost + last.received - first.received);
  });
  t.comment(`under load: output fps medians ${outputs.join(' ')}; input ${inputs.join(' ')}; packets lost % ${lossPct.map((p) => p.toFixed(1)).join(' ')}`);
  const mediaWarnings = server.output().split('\n').filter((l) => l.includes('"level":40') && l.includes('"module":"media"'));
  t.comment(`the media node's last warnings: ${mediaWarnings.slice(-10).map((l) => (JSON.parse(l) as { msg: string }).msg).join('; ') || 'none'}`);
  const cap = Number(readFileSync('/proc/sys/net/core/rmem_max', 'utf8').trim());
  t.ok(Math.max(...lossPct) <= 1, `no stream loses packets on loopback (worst ${Math.max(...lossPct).toFixed(1)} %; net.core.rmem_max ${cap}: the node asks 4 MiB per socket)`);
  t.ok(rows.every((samples) => samples.every((s) => s.state !== 'OFFLINE' && s.state !== 'ERROR')), 'every stream stays attached (never OFFLINE)');
  t.ok(rows.every((samples) => new Set(samples.map((s) => s.session)).size === 1), 'every publisher keeps its session');
  // Starved is relative: how fast the cores are varies from day to day; an even share does not.
  t.ok(Math.min(...outputs) >= Math.max(3, 0.6 * median(outputs)), `no stream is starved (lowest output median ${Math.min(...outputs)} fps, median of streams ${median(outputs)})`);
  t.ok(Math.max(...outputs) <= 1.6 * Math.max(1, Math.min(...outputs)), `output is shared evenly (max/min ${(Math.max(...outputs) / Math.max(1, Math.min(...outputs))).toFixed(2)})`);
  const states = new Set(rows.flat().map((s) => s.state));
  t.comment(`states seen: ${[...states].join(', ')}`);
  // The load goes: three quarters of the publishers stop (DELETE, as OBS does); the rest recover.
  for (const m of made.slice(n / 4)) await pubs.stop(m.publisher);
  const rest = made.slice(0, n / 4);
  const recovered = await watch(server, rest.map((m) => m.id), 20);
  recovered.forEach((samples, i) => {
    // The last 10 s: back to the publisher's rate (median), never starved again.
    const tail = samples.slice(-5);
    const ok = tail.every((s) => s.state === 'ONLINE' && s.output >= 18) && median(tail.map((s) => s.output)) >= 26;
    t.ok(ok, `stream ${i} recovers once the load goes (${samples.map((s) => `${s.state}${s.endReason ? `(${s.endReason})` : ''}:${s.output}`).join(' ')})`);
  });
  // What the node warned of after the load went: why a kept publisher would have been dropped.
  const said = server.output().split('\n').filter((l) => /"level":(40|50)/.test(l)).slice(-10);
  t.comment(`the node's last warnings and errors: ${said.map((l) => l.slice(0, 300)).join('\n') || 'none'}`);
  const ended = await Promise.all(rest.map(async (m) => (await sample(server, m.id)).state));
  t.notOk(ended.includes('OFFLINE'), 'no stream that kept its publisher was ended');
});
