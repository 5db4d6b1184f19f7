/**
 * The real entry points in child processes: `serve` starts on the embedded store, prints its
 * URLs and a ready-to-use key on first start, answers, and shuts down cleanly on SIGTERM;
 * `keys create --json` prints {key, account}; `doctor` reports each dependency.
 */
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { freePort } from '../helpers/net.ts';

const run = promisify(execFile);
const ROOT = new URL('../..', import.meta.url).pathname;
const CLI = ['--import', 'tsx', join(ROOT, 'control/main.ts')];

function tempDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'rv-cli-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('serve prints URLs and a key on first start, serves, and exits 0 on SIGTERM', { timeout: 60_000 }, async (t) => {
  const dataDir = tempDir(t);
  const child = spawn(process.execPath, [...CLI, 'serve', '--port', '0'], {
    env: { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'warn', RENDER_WORKERS: '0', ROLES: 'api,worker' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  child.stderr.on('data', (d) => process.stderr.write(d));
  const banner = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (/Your API key/.test(out) && out.endsWith('\n')) resolve(out);
    });
    child.on('exit', (code) => reject(new Error(`exited ${code} before printing: ${out}`)));
  });
  const url = /API\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(banner)?.[1];
  const key = /(rv_[A-Za-z0-9_-]{43})/.exec(banner)?.[1];
  t.ok(url, 'prints its URL');
  t.ok(key, 'prints a ready-to-use key');
  t.match(banner, /\/docs/, 'points at the API docs');

  t.match(banner, /\/web\/songs\.html/, 'names the songs page');
  t.match(banner, /\/readyz/, 'names the readiness URL');
  for (const path of ['/livez', '/readyz', '/healthz']) t.equal((await fetch(`${url}${path}`)).status, 200, `${path} answers 200`);
  const usage = await fetch(`${url}/music/v1/usage`, { headers: { authorization: `Bearer ${key}` } });
  t.equal(usage.status, 200, 'the printed key works');

  child.kill('SIGTERM');
  const [code] = (await once(child, 'exit')) as [number | null];
  t.equal(code, 0, 'graceful shutdown exits 0');
});

t.test('serve --help prints usage with every flag and exits 0', { timeout: 60_000 }, async (t) => {
  for (const flag of ['--help', '-h']) {
    const { stdout } = await run(process.execPath, [...CLI, 'serve', flag], { env: { ...process.env } });
    t.match(stdout, /^usage: reverie serve/, `${flag}: usage first`);
    t.match(stdout, /--webrtc-udp-port-range/, `${flag}: lists the variable flags`);
    t.match(stdout, /--drain-timeout/);
  }
  const bad = await run(process.execPath, [...CLI, 'serve', '--no-such-flag'], { env: { ...process.env } }).catch((e: { code: number; stderr: string }) => e);
  t.equal((bad as { code: number }).code, 2, 'an unknown flag is a usage error');
  t.match((bad as { stderr: string }).stderr, /usage: reverie serve/);
});

t.test('a drain that outlasts DRAIN_TIMEOUT ends the process with 1 and one line saying so', { timeout: 60_000 }, async (t) => {
  // A server whose close never finishes (a stuck render, a hung socket): the real signal handler.
  const script = `
    import pino from 'pino';
    import { closeOnSignals } from ${JSON.stringify(join(ROOT, 'control/Server.ts'))};
    closeOnSignals({ close: () => new Promise(() => {}) }, pino(), 1);
    setInterval(() => {}, 1000);
    process.stdout.write('armed\\n');
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  let sent = false;
  let signalledAt = 0;
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    if (out.includes('armed') && !sent) {
      sent = true; // one signal: a second one means "exit now"
      signalledAt = performance.now();
      child.kill('SIGTERM');
    }
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  const s = (performance.now() - signalledAt) / 1000;
  t.equal(code, 1, 'exits 1');
  t.ok(s >= 0.9 && s < 6, `at the 1 s deadline, not hung and not at once (${s.toFixed(1)} s after SIGTERM)`);
  t.match(out, /drain did not finish within DRAIN_TIMEOUT \(1 s\)/);
});

t.test('keys create --plan free --json prints {key, account}', { timeout: 60_000 }, async (t) => {
  const dataDir = tempDir(t);
  const { stdout } = await run(process.execPath, [...CLI, 'keys', 'create', '--plan', 'free', '--json'], { env: { ...process.env, DATA_DIR: dataDir } });
  const out = JSON.parse(stdout);
  t.same(Object.keys(out).sort(), ['account', 'key']);
  t.match(out.key, /^rv_/);
  t.match(out.account, /^acc_/);
  const bad = await run(process.execPath, [...CLI, 'keys', 'create', '--plan', 'platinum'], { env: { ...process.env, DATA_DIR: dataDir } }).catch((e: { code: number; stderr: string }) => e);
  t.equal((bad as { code: number }).code, 2);
  t.match((bad as { stderr: string }).stderr, /--plan must be one of/);
});

t.test('an invalid variable stops start-up naming it', { timeout: 60_000 }, async (t) => {
  const bad = await run(process.execPath, [...CLI, 'serve'], { env: { ...process.env, PORT: 'eighty' } }).catch((e: { code: number; stderr: string }) => e);
  t.equal((bad as { code: number }).code, 2);
  t.match((bad as { stderr: string }).stderr, /PORT/);
});

t.test('doctor checks each dependency and says how to fix what is missing', { timeout: 60_000 }, async (t) => {
  const dataDir = tempDir(t);
  const { stdout } = await run(process.execPath, [...CLI, 'doctor', '--json'], { env: { ...process.env, DATA_DIR: dataDir } });
  const results = JSON.parse(stdout) as { name: string; ok: boolean; fix: string | null }[];
  for (const name of ['node', 'data dir', 'better-sqlite3', 'ffmpeg', 'redis-server', 'gstreamer elements', 'onnxruntime-node']) {
    t.ok(results.find((r) => r.name === name), `checks ${name}`);
  }
  for (const r of results) if (!r.ok) t.match(r.fix, /apt-get install|npm/, `${r.name}: says how to fix`);
});

t.test("doctor checks the live path's network settings: interfaces, port range, TURN reachability", { timeout: 60_000 }, async (t) => {
  const dataDir = tempDir(t);
  const turnPort = await freePort();
  const coturn = spawn('turnserver', ['-c', '/dev/null', '--listening-ip=127.0.0.1', `--listening-port=${turnPort}`, '--no-tls', '--no-dtls', '--no-cli', '--use-auth-secret', '--static-auth-secret=doctor-test-secret-123', '--realm=doctor.test', '--log-file=stdout'], { stdio: 'ignore' });
  t.teardown(() => coturn.kill('SIGKILL'));
  const doctor = async (env: Record<string, string>) => {
    const { stdout } = await run(process.execPath, [...CLI, 'doctor', '--json'], { env: { ...process.env, DATA_DIR: dataDir, ...env } }).catch((e: { stdout: string }) => e);
    return JSON.parse(stdout) as { name: string; ok: boolean; detail: string; fix: string | null }[];
  };
  // The kernel's cap on a socket's receive buffer: asking more is flagged, asking the cap is fine.
  const rmemMax = Number(readFileSync('/proc/sys/net/core/rmem_max', 'utf8').trim());
  const bad = await doctor({ WEBRTC_INTERFACES: '198.51.100.77', WEBRTC_UDP_PORT_RANGE: '40100-40101', MEDIA_CAPACITY: '8', TURN_URLS: 'turn:127.0.0.1:9?transport=udp', TURN_SECRET: 'doctor-test-secret-123', WEBRTC_UDP_BUFFER_BYTES: String(Math.max(65_536, rmemMax + 4096)) });
  const get = (rs: typeof bad, name: string) => rs.find((r) => r.name === name || r.name.startsWith(name));
  t.match(get(bad, 'WEBRTC_INTERFACES'), { ok: false, detail: /198\.51\.100\.77/ }, 'an address not on this machine is named');
  t.match(get(bad, 'WEBRTC_UDP_PORT_RANGE'), { ok: false, fix: /MEDIA_CAPACITY/ }, 'a range smaller than the capacity is flagged');
  t.match(get(bad, 'TURN'), { ok: false, fix: /TURN server/ }, 'an unreachable TURN server is flagged');
  t.match(get(bad, 'UDP receive buffers'), { ok: false, detail: new RegExp(`rmem_max ${rmemMax}`), fix: /sysctl -w net\.core\.rmem_max=/ }, 'a receive buffer above the kernel cap is flagged, with the sysctl that lifts it');
  const goodEnv = { WEBRTC_INTERFACES: '127.0.0.1', WEBRTC_UDP_PORT_RANGE: '40100-40199', MEDIA_CAPACITY: '8', WHEP_VIEWERS_PER_NODE: '92', TURN_URLS: `turn:127.0.0.1:${turnPort}?transport=udp`, TURN_SECRET: 'doctor-test-secret-123', WEBRTC_UDP_BUFFER_BYTES: String(Math.max(65_536, Math.min(rmemMax, 4 * 1024 * 1024))) };
  let good = await doctor(goodEnv);
  for (let i = 0; i < 20 && !get(good, 'TURN')?.ok; i++) good = await doctor(goodEnv);
  for (const name of ['WEBRTC_INTERFACES', 'WEBRTC_UDP_PORT_RANGE', 'UDP ports bind', 'TURN', 'UDP receive buffers']) t.equal(get(good, name)?.ok, true, `${name}: ok (${get(good, name)?.detail})`);
  t.match(get(good, 'capacity'), { ok: true, detail: /^8 streams with a publisher \(MEDIA_CAPACITY\); \d+ connected viewers \(WHEP_VIEWERS_PER_NODE\)/ }, 'the node capacity, viewers included, is shown');
  const set = await doctor({ ...goodEnv, WHEP_VIEWERS_PER_NODE: '2400', WHEP_VIEWERS_PER_STREAM: '1200', WHEP_PER_ADDRESS_PER_MINUTE: '300' });
  t.match(get(set, 'capacity'), { detail: /2400 connected viewers \(WHEP_VIEWERS_PER_NODE\), 1200 of one stream .*300 WHEP a minute/ }, 'as the operator set it');
  t.notMatch(get(set, 'capacity')?.detail, /CASCADE_ORIGIN_VIEWERS/, 'one process: no cascade to show');
  t.match(get(set, 'capacity')?.detail, /renditions beside the full encode: half \(0\.5 of the size, 300 kb\/s\) \(RENDITIONS\)/, 'the default rendition is shown');
  t.match(get(await doctor({ ...goodEnv, RENDITIONS: 'none' }), 'capacity')?.detail, /renditions beside the full encode: none/, 'and none when turned off');
  const cascade = await doctor({ ...goodEnv, REDIS_URL: 'redis://127.0.0.1:1', CASCADE_ORIGIN_VIEWERS: '40', EDGE_LINGER_MS: '2000' });
  t.match(get(cascade, 'capacity'), { detail: /viewers past 40 on its own node go to other media nodes .*\(CASCADE_ORIGIN_VIEWERS\), which stop 2000 ms after their last viewer/ }, 'scale-out: the cascade as set');
  // Each viewer holds a port too: 100 ports carry 8 streams and 92 viewers, not 2400.
  t.match(get(set, 'WEBRTC_UDP_PORT_RANGE'), { ok: false, fix: /at least MEDIA_CAPACITY \+ WHEP_VIEWERS_PER_NODE \(2408\) ports, or lower WHEP_VIEWERS_PER_NODE to 92/ }, 'a range too small for the viewers is flagged');
});
