/**
 * `./reverie`, the one start command: passes CLI commands through, checks Node and the install
 * before starting, and on a system without apt says what to install instead of failing obscurely.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';

const run = promisify(execFile);
const ROOT = new URL('../..', import.meta.url).pathname;
const SCRIPT = join(ROOT, 'reverie');

type Result = { code: number; stdout: string; stderr: string };
const exec = (args: string[], env: Record<string, string>): Promise<Result> =>
  run(SCRIPT, args, { env, cwd: ROOT }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );

t.test('./reverie passes other commands to the CLI', { timeout: 60_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-script-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const r = await exec(['keys', 'create', '--json'], { ...process.env, DATA_DIR: dataDir } as Record<string, string>);
  t.equal(r.code, 0, r.stderr);
  t.match(JSON.parse(r.stdout), { key: /^rv_/, account: /^acc_/ });
  const help = await exec(['serve', '--help'], process.env as Record<string, string>);
  t.match(help.stdout, /^usage: reverie serve/);
});

t.test('check says what setup would do and changes nothing', { timeout: 60_000 }, async (t) => {
  const r = await exec(['check'], process.env as Record<string, string>);
  t.match(r.stderr, /system packages: all \d+ present/, 'this machine has the run and build packages');
  t.match(r.stderr, /node v(20|2[2-9])\./);
  t.match(r.stderr, /node_modules is (current|a link to a shared install)|would run npm ci/, 'reports the install');
  t.equal(r.code, /would/.test(r.stderr) ? 1 : 0, 'exit 1 exactly when something is pending');
  // A checkout whose lock changed after the install: setup would reinstall, check only says so.
  const clone = mkdtempSync(join(tmpdir(), 'rv-check-'));
  t.teardown(() => rmSync(clone, { recursive: true, force: true }));
  await run('git', ['clone', '-q', ROOT, clone]);
  const fresh = await run(join(clone, 'reverie'), ['check'], { env: process.env, cwd: clone }).then(
    (x) => ({ code: 0, stderr: x.stderr }),
    (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
  );
  t.equal(fresh.code, 1, 'a fresh clone has work pending');
  t.match(fresh.stderr, /would run npm ci/);
});

t.test('without apt it lists the packages and points at the container', { timeout: 60_000 }, async (t) => {
  // A PATH with the tools the script uses but no dpkg-query/apt-get: another Linux, or macOS.
  const bin = mkdtempSync(join(tmpdir(), 'rv-noapt-'));
  t.teardown(() => rmSync(bin, { recursive: true, force: true }));
  mkdirSync(join(bin, 'b'));
  for (const tool of ['bash', 'sh', 'node', 'sed', 'awk', 'dirname', 'id', 'grep', 'cat']) {
    const found = await run('bash', ['-c', `command -v ${tool}`]).then((r) => r.stdout.trim(), () => '');
    if (found) symlinkSync(found, join(bin, 'b', tool));
  }
  const r = await exec(['up'], { PATH: join(bin, 'b'), HOME: bin });
  t.equal(r.code, 1, 'stops before starting');
  t.match(r.stderr, /not Debian or Ubuntu/);
  t.match(r.stderr, /gstreamer1\.0-plugins-good/, 'lists the packages from the one list');
  t.match(r.stderr, /docker compose up/, 'points at the container');
  t.match(r.stderr, /REVERIE_SKIP_PACKAGES=1/, 'and at the way on once they are installed');
});
