/**
 * The container files, checked without a container engine (CI builds and runs the CPU image too
 * where one works: .ci/containers). A small Dockerfile parser applies hadolint's main rules and
 * ours: non-root user, a /readyz health check, the WebRTC UDP range published and configured,
 * runtime dependencies only, packages from the one list, every COPY source present and not
 * excluded by .dockerignore. compose.yaml is parsed (anchors and merges resolved) and checked for
 * the embedded default, the scale-out profile, UDP ports and health checks.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { parse } from 'yaml';

const ROOT = new URL('../..', import.meta.url).pathname;
const read = (f: string) => readFileSync(join(ROOT, f), 'utf8');

interface Instruction {
  op: string;
  args: string;
  line: number;
}

/** Dockerfile → instructions: comments dropped, `\` continuations joined, keywords upper-cased. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let buf = '';
  let start = 0;
  text.split('\n').forEach((raw, i) => {
    const line = raw.trimEnd();
    if (!buf && (line.trim() === '' || line.trimStart().startsWith('#'))) return;
    if (buf && line.trimStart().startsWith('#')) return;
    if (!buf) start = i + 1;
    if (line.endsWith('\\')) {
      buf += `${line.slice(0, -1)} `;
      return;
    }
    buf += line;
    const m = /^\s*([A-Za-z]+)\s+([\s\S]*)$/.exec(buf);
    if (m) out.push({ op: (m[1] as string).toUpperCase(), args: (m[2] as string).trim(), line: start });
    else out.push({ op: '?', args: buf, line: start });
    buf = '';
  });
  return out;
}

const KNOWN = new Set(['FROM', 'RUN', 'CMD', 'LABEL', 'EXPOSE', 'ENV', 'ADD', 'COPY', 'ENTRYPOINT', 'VOLUME', 'USER', 'WORKDIR', 'ARG', 'ONBUILD', 'STOPSIGNAL', 'HEALTHCHECK', 'SHELL']);

/** Problems hadolint would report (the rules that apply to our files) plus our own. */
function lintDockerfile(name: string, ins: Instruction[], ignore: string[]): string[] {
  const p: string[] = [];
  const at = (i: Instruction, msg: string) => p.push(`${name}:${i.line} ${i.op}: ${msg}`);
  const stages = ins.filter((i) => i.op === 'FROM');
  if (stages.length === 0) p.push(`${name}: no FROM`);
  const lastFrom = ins.lastIndexOf(stages.at(-1) as Instruction);
  const final = ins.slice(lastFrom);
  for (const i of ins) {
    if (!KNOWN.has(i.op)) at(i, 'unknown instruction');
    if (i.op === 'FROM' && /:latest\b/.test(i.args)) at(i, 'DL3007 pin the image tag, not latest');
    if (i.op === 'FROM' && !/[:@$]/.test(i.args.split(/\s+/)[0] as string)) at(i, 'DL3006 tag the image');
    if (i.op === 'WORKDIR' && !i.args.startsWith('/')) at(i, 'DL3000 WORKDIR must be absolute');
    if (i.op === 'ADD' && !/^https?:/.test(i.args)) at(i, 'DL3020 use COPY for files');
    if (i.op === 'RUN' && /\bsudo\b/.test(i.args)) at(i, 'DL3004 no sudo');
    if (i.op === 'RUN' && /\bcd\s/.test(i.args)) at(i, 'DL3003 use WORKDIR, not cd');
    if (i.op === 'RUN' && /apt-get install/.test(i.args)) {
      if (!/--no-install-recommends/.test(i.args)) at(i, 'DL3015 apt-get install --no-install-recommends');
      if (!/-y\b/.test(i.args)) at(i, 'DL3014 apt-get install -y');
      if (!/rm -rf \/var\/lib\/apt\/lists/.test(i.args)) at(i, 'DL3009 remove the apt lists');
      if (!/setup\/packages/.test(i.args)) at(i, 'packages must come from setup/debian-packages.txt (one list)');
    }
    if (i.op === 'RUN' && /apt-get upgrade|dist-upgrade/.test(i.args)) at(i, 'DL3005 no apt-get upgrade');
    if ((i.op === 'CMD' || i.op === 'ENTRYPOINT') && !i.args.startsWith('[')) at(i, 'DL3025 JSON form');
    // A full install is fine where the build needs dev dependencies, if the stage prunes them after.
    if (i.op === 'RUN' && /npm (ci|install)\b/.test(i.args) && !/--omit=dev/.test(i.args)) {
      const stageEnd = ins.findIndex((j, k) => k > ins.indexOf(i) && j.op === 'FROM');
      const rest = ins.slice(ins.indexOf(i), stageEnd < 0 ? undefined : stageEnd);
      if (!rest.some((j) => j.op === 'RUN' && /npm prune\b[^&;]*--omit=dev/.test(j.args))) at(i, 'runtime images install runtime dependencies only (--omit=dev, or npm prune --omit=dev after the build)');
    }
    if (i.op === 'COPY' && !/--from=/.test(i.args)) {
      const parts = i.args.split(/\s+/).filter((a) => !a.startsWith('--'));
      for (const src of parts.slice(0, -1)) {
        if (src === '.') continue;
        const path = src.replace(/\/$/, '');
        if (!existsSync(join(ROOT, path))) at(i, `COPY source ${src} does not exist`);
        if (ignore.some((g) => g === path || path.startsWith(`${g}/`))) at(i, `COPY source ${src} is excluded by .dockerignore`);
      }
    }
  }
  const user = final.filter((i) => i.op === 'USER').at(-1);
  if (!user) p.push(`${name}: DL3002 the final stage runs as root (no USER)`);
  else if (/^(root|0)(:|$)/.test(user.args)) at(user, 'DL3002 last USER is root');
  const health = final.find((i) => i.op === 'HEALTHCHECK');
  if (!health) p.push(`${name}: no HEALTHCHECK`);
  else if (!/\/readyz/.test(health.args)) at(health, 'the health check should ask /readyz');
  const expose = final.filter((i) => i.op === 'EXPOSE').map((i) => i.args).join(' ');
  const range = /WEBRTC_UDP_PORT_RANGE=(\d+-\d+)/.exec(final.filter((i) => i.op === 'ENV').map((i) => i.args).join(' '))?.[1];
  if (!range) p.push(`${name}: WEBRTC_UDP_PORT_RANGE not set (WebRTC would use random ports nobody publishes)`);
  else if (!expose.includes(`${range}/udp`)) p.push(`${name}: EXPOSE lacks ${range}/udp`);
  if (!/\b8080\b/.test(expose)) p.push(`${name}: EXPOSE lacks 8080`);
  const entry = final.find((i) => i.op === 'ENTRYPOINT');
  if (!entry || !/bin\/reverie\.js/.test(entry.args)) p.push(`${name}: ENTRYPOINT should run bin/reverie.js`);
  // The image runs the build (dist/), not the TypeScript through tsx: bin/reverie.js picks dist/.
  const builds = ins.some((i) => i.op === 'RUN' && /npm run build\b/.test(i.args));
  const hasDist = final.some((i) => (i.op === 'RUN' && /npm run build\b/.test(i.args)) || (i.op === 'COPY' && /--from=\S+\s+\S*\/dist\/?\s/.test(i.args)));
  if (!builds || !hasDist) p.push(`${name}: the image should run the build (npm run build, dist/ in the final stage)`);
  return p;
}

const dockerignore = read('.dockerignore')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));

t.test('.dockerignore keeps installs, builds, data and secrets out of the build context', async (t) => {
  for (const want of ['node_modules', 'media/gst/build', 'data', '.git', '.env']) t.ok(dockerignore.includes(want), `ignores ${want}`);
});

for (const file of ['Dockerfile', 'Dockerfile.gpu']) {
  t.test(`${file} passes the lint: non-root, /readyz health check, UDP range published, runtime deps only`, async (t) => {
    const ins = parseDockerfile(read(file));
    t.same(lintDockerfile(file, ins, dockerignore), [], 'no problems');
  });
}

t.test('the Dockerfile lint catches what it claims to', async (t) => {
  const bad = parseDockerfile(['FROM node:latest', 'WORKDIR app', 'RUN apt-get install -y ffmpeg', 'COPY nope/ nope/', 'COPY node_modules node_modules', 'RUN npm ci', 'EXPOSE 8080', 'CMD node bin/reverie.js'].join('\n'));
  const problems = lintDockerfile('bad', bad, dockerignore).join('\n');
  for (const want of [/DL3007/, /DL3000/, /DL3015/, /DL3009/, /one list/, /nope\/ does not exist/, /excluded by \.dockerignore/, /--omit=dev/, /DL3025/, /DL3002/, /no HEALTHCHECK/, /WEBRTC_UDP_PORT_RANGE not set/, /run the build/]) {
    t.match(problems, want, `flags ${want}`);
  }
});

t.test('the server needs no devDependency at run time: the images run the build, the sources run through tsx (a dependency)', async (t) => {
  const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };
  t.ok(pkg.dependencies['tsx'], 'tsx is a runtime dependency');
  t.notOk(pkg.devDependencies['tsx'], 'and not a devDependency');
  t.match(read('bin/reverie.js'), /dist|DEFAULT_OUT/, 'bin/reverie.js runs the build when it is current');
  t.match(read('bin/reverie.js'), /tsx/, 'and the sources through tsx otherwise');
  t.ok(dockerignore.includes('dist'), 'a local dist/ stays out of the build context: the image builds its own');
});

interface ComposeService {
  build?: unknown;
  image?: string;
  profiles?: string[];
  ports?: string[];
  command?: string[];
  environment?: Record<string, string>;
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
  stop_grace_period?: string;
}

t.test('compose.yaml: the embedded default by default, a scale-out profile of Redis + api, media and worker, UDP published, health checks', async (t) => {
  // Compose's own interpolation with an empty environment: `${VAR:-default}` → default.
  const text = read('compose.yaml').replace(/\$\{(\w+):-([^}]*)\}/g, (_m, _v: string, d: string) => d);
  t.notMatch(text, /\$\{/, 'every variable has a default');
  const doc = parse(text, { merge: true }) as { services: Record<string, ComposeService> };
  const s = doc.services;
  t.same(Object.keys(s).sort(), ['api', 'media', 'redis', 'reverie', 'worker']);
  t.match(read('.env'), /^COMPOSE_PROFILES=embedded$/m, '.env selects the embedded default when no profile is named');
  t.same(s['reverie']?.profiles, ['embedded']);
  for (const name of ['redis', 'api', 'media', 'worker']) t.same(s[name]?.profiles, ['scale-out'], `${name} is in the scale-out profile`);
  for (const [name, svc] of Object.entries(s)) {
    t.ok(svc.healthcheck?.test?.length, `${name} has a health check`);
    if (name !== 'redis') {
      t.match(svc.healthcheck?.test.join(' '), /\/readyz/, `${name} checks /readyz`);
      t.equal(svc.build, '.', `${name} builds the CPU Dockerfile`);
      t.equal(svc.stop_grace_period, '30s', `${name} gives the 25 s drain room`);
    }
  }
  const udp = (svc: ComposeService | undefined) => (svc?.ports ?? []).find((p) => p.endsWith('/udp'));
  for (const name of ['reverie', 'media']) {
    const svc = s[name];
    const published = udp(svc);
    t.ok(published, `${name} publishes UDP`);
    const range = /^(\d+-\d+):(\d+-\d+)\/udp$/.exec(published ?? '');
    t.equal(range?.[1], range?.[2], `${name}: same port numbers outside and in (ICE candidates carry them)`);
    t.equal(svc?.environment?.['WEBRTC_UDP_PORT_RANGE'], range?.[2], `${name}: WEBRTC_UDP_PORT_RANGE matches the published range`);
    t.ok(svc?.environment?.['WEBRTC_ANNOUNCED_ADDRESSES'], `${name}: announces an address clients can reach`);
  }
  t.same(s['api']?.command, ['serve', '--roles', 'api']);
  t.same(s['media']?.command, ['serve', '--roles', 'media']);
  t.same(s['worker']?.command, ['serve', '--roles', 'worker']);
  for (const name of ['api', 'media', 'worker']) {
    t.equal(s[name]?.environment?.['REDIS_URL'], 'redis://redis:6379', `${name} uses the compose Redis`);
    t.equal(s[name]?.depends_on?.['redis']?.condition, 'service_healthy', `${name} waits for Redis`);
    t.ok((s[name]?.environment?.['LINK_SIGNING_SECRET'] ?? '').length >= 32, `${name}: one link secret, long enough for the config check`);
  }
  t.notOk(udp(s['api']), 'the api role needs no UDP');
  // The api forwards WHIP/WHEP to the node's PUBLIC_URL: it must be the published port on an address containers reach.
  t.equal(s['media']?.environment?.['PUBLIC_URL'], 'http://127.0.0.1:8081', 'media PUBLIC_URL defaults to its published port');
  t.ok(s['media']?.ports?.includes('8081:8080'), 'and that port is published');
});
