/**
 * Small network labs for the field tests: Linux network namespaces joined by veth pairs, with
 * nftables rules for NAT and firewalls, all created by the test and removed on teardown. Traffic
 * stays inside the lab: every address is in 198.18.0.0/15 (reserved for network benchmarking,
 * RFC 2544) or in a private range that exists only inside a namespace.
 *
 *   const lab = await createLab(t, 7, ['srv', 'rt', 'pub']);    // lab 7 owns 198.18.28.0–198.18.31.255
 *   await lab.link({ ns: 'srv', addr: lab.ip(0, 2) }, { ns: 'rt', addr: lab.ip(0, 1) });
 *   await lab.run('srv', ['ip', 'route', 'add', 'default', 'via', lab.ip(0, 1, false)]);
 *   const child = lab.spawn('pub', process.execPath, [...]);
 *
 * `ns: null` is the test's own namespace: labs reach it through one veth with a route for their
 * own /22 only. Needs root (CI runs as root) and the iproute2 and nftables packages.
 *
 * `lab.impairedLink(a, b, { delayMs, jitterMs, lossPercent, rateKbps })` joins two namespaces
 * through a link with delay, jitter, loss and a rate limit instead of a clean veth (see
 * impairedLink.ts; it needs a C compiler, `cc`, from the build-essential package).
 */
import { spawn, execFile, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { ImpairedLink, type Impairment } from './impairedLink.ts';

const exec = promisify(execFile);

/**
 * Each lab number's owner (`<id>`: `{pid, tag}`), written when a lab is made and removed with it:
 * a run killed outright (`kill -9`, a cancelled CI job) leaves its namespaces, veths and route
 * behind, and the next lab with that number removes them instead of failing on "File exists".
 * On tmpfs, so a reboot forgets it along with the namespaces.
 */
const OWNERS = '/run/reverie-labs';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes lab `id` for this process, first removing what a dead owner left: namespaces and links named by its tag, the route to the lab's /22. */
async function claim(id: number, tag: string, dest: string): Promise<() => Promise<void>> {
  await mkdir(OWNERS, { recursive: true });
  const file = `${OWNERS}/${id}`;
  const prev = await readFile(file, 'utf8')
    .then((s) => JSON.parse(s) as { pid: number; tag: string })
    .catch(() => null);
  if (prev !== null && alive(prev.pid)) throw new Error(`lab ${id} is in use by process ${prev.pid}: give each test file its own lab number`);
  if (prev !== null) {
    const { stdout: nss } = await exec('ip', ['netns', 'list']);
    for (const ns of nss.split('\n').map((l) => l.split(' ')[0] ?? '')) {
      if (ns.startsWith(`${prev.tag}-`)) await exec('ip', ['netns', 'del', ns]).catch(() => undefined);
    }
    const { stdout: links } = await exec('ip', ['-o', 'link', 'show']);
    for (const m of links.matchAll(/^\d+: ([^:@\s]+)/gm)) {
      if (m[1]!.startsWith(prev.tag)) await exec('ip', ['link', 'del', m[1]!]).catch(() => undefined);
    }
    await exec('ip', ['route', 'del', dest]).catch(() => undefined);
  }
  await writeFile(file, JSON.stringify({ pid: process.pid, tag }));
  return () => rm(file, { force: true });
}

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface End {
  /** A lab namespace by its short name, or null for the test's own. */
  ns: string | null;
  /** Address with prefix, e.g. `198.18.28.2/24`. */
  addr: string;
}

export interface Lab {
  /** The kernel name of a lab namespace. */
  ns(name: string): string;
  /** `198.18.<4·lab + subnet>.<host>` with `/24` (or bare with cidr=false); labs 64–127 are in 198.19. */
  ip(subnet: 0 | 1 | 2 | 3, host: number, cidr?: boolean): string;
  /** Runs a command in a namespace (null: here); resolves with stdout, rejects on a non-zero exit. */
  run(ns: string | null, argv: string[], input?: string): Promise<string>;
  /** A veth pair between two namespaces with these addresses, both ends up. */
  link(a: End, b: End): Promise<void>;
  /**
   * An emulated link between two namespaces with these addresses (TUN devices joined by the
   * forwarder of impairedLink.ts, `impairment` in both directions; change it per direction with
   * `set`). Removed on teardown. `seed` fixes which packets the random loss takes (default 1).
   */
  impairedLink(a: End, b: End, impairment?: Impairment, seed?: number): Promise<ImpairedLink>;
  /** Loads an nftables ruleset into a namespace. */
  nft(ns: string, ruleset: string): Promise<void>;
  /** Starts a process in a namespace; it is killed (SIGKILL) on teardown if still running. */
  spawn(ns: string, command: string, args: string[], opts?: SpawnOptions): ChildProcess;
  /** Routes this lab's /22 from the test's own namespace via `gateway` (reached over a link to ns null). */
  routeFromHere(gateway: string): Promise<void>;
}

/** True when this process may create namespaces (root on Linux with iproute2). */
export async function canUseNetns(): Promise<boolean> {
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return false;
  try {
    await exec('ip', ['netns', 'list']);
    await exec('nft', ['--version']);
    return true;
  } catch {
    return false;
  }
}

/**
 * Creates the namespaces `names` for lab number `id` (0–127; each test file uses its own, so
 * files running in parallel never share addresses) and removes everything on teardown.
 */
export async function createLab(t: Teardown, id: number, names: string[]): Promise<Lab> {
  if (id < 0 || id > 127) throw new RangeError('lab id must be 0–127');
  const tag = `rv${randomBytes(2).toString('hex')}`;
  const full = (name: string) => `${tag}-${name}`;
  const children: ChildProcess[] = [];
  const rootLinks: string[] = [];
  const rootRoutes: string[] = [];
  // 198.18.0.0/15 holds 128 labs of a /22: 0–63 in 198.18, 64–127 in 198.19.
  const net = `198.${18 + Math.floor(id / 64)}`;
  const dest = `${net}.${(id % 64) * 4}.0/22`;
  const release = await claim(id, tag, dest);
  let veths = 0;
  let tuns = 0;

  const run = async (ns: string | null, argv: string[], input?: string): Promise<string> => {
    const [cmd, ...args] = ns === null ? argv : ['ip', 'netns', 'exec', full(ns), ...argv];
    if (input === undefined) return (await exec(cmd as string, args)).stdout;
    return new Promise((resolve, reject) => {
      const child = spawn(cmd as string, args, { stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${argv.join(' ')}: exit ${code}: ${err.trim()}`))));
      child.stdin.end(input);
    });
  };

  t.teardown(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await Promise.all(children.map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once('exit', r)) : Promise.resolve())));
    for (const r of rootRoutes) await exec('ip', ['route', 'del', r]).catch(() => undefined);
    for (const l of rootLinks) await exec('ip', ['link', 'del', l]).catch(() => undefined);
    for (const n of names) await exec('ip', ['netns', 'del', full(n)]).catch(() => undefined);
    await release();
  });

  for (const n of names) {
    await exec('ip', ['netns', 'add', full(n)]);
    await run(n, ['ip', 'link', 'set', 'lo', 'up']);
  }

  const lab: Lab = {
    ns: full,
    ip: (subnet, host, cidr = true) => `${net}.${(id % 64) * 4 + subnet}.${host}${cidr ? '/24' : ''}`,
    run,
    async link(a, b) {
      const ea = `${tag}v${veths}a`;
      const eb = `${tag}v${veths++}b`;
      await exec('ip', ['link', 'add', ea, 'type', 'veth', 'peer', 'name', eb]);
      for (const [end, dev] of [[a, ea], [b, eb]] as const) {
        if (end.ns === null) rootLinks.push(dev);
        else await exec('ip', ['link', 'set', dev, 'netns', full(end.ns)]);
        await run(end.ns, ['ip', 'addr', 'add', end.addr, 'dev', dev]);
        await run(end.ns, ['ip', 'link', 'set', dev, 'up']);
      }
    },
    async impairedLink(a, b, impairment = {}, seed = 1) {
      const nsPath = (ns: string | null) => (ns === null ? `/proc/${process.pid}/ns/net` : `/run/netns/${full(ns)}`);
      const [ta, tb] = [`${tag}t${tuns}a`, `${tag}t${tuns++}b`];
      const link = await ImpairedLink.start(nsPath(a.ns), ta, nsPath(b.ns), tb, seed);
      // Killed with the lab's other processes on teardown: the devices go with it.
      children.push(link.child);
      await link.set('both', impairment);
      for (const [end, dev] of [[a, ta], [b, tb]] as const) {
        await run(end.ns, ['ip', 'addr', 'add', end.addr, 'dev', dev]);
        await run(end.ns, ['ip', 'link', 'set', dev, 'up']);
      }
      return link;
    },
    async nft(ns, ruleset) {
      await run(ns, ['nft', '-f', '-'], ruleset);
    },
    spawn(ns, command, args, opts = {}) {
      const child = spawn('ip', ['netns', 'exec', full(ns), command, ...args], opts);
      children.push(child);
      return child;
    },
    async routeFromHere(gateway) {
      await exec('ip', ['route', 'add', dest, 'via', gateway]);
      rootRoutes.push(dest);
    },
  };
  return lab;
}
