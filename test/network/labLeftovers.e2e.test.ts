/**
 * A network lab left by a run killed outright (`kill -9`: no teardown ran) is removed by the next
 * lab with the same number: its namespaces, its veths and the route to its /22 would otherwise
 * make that lab fail with "RTNETLINK answers: File exists" (a cancelled CI run failed the next
 * run's network tests this way).
 */
import { execFile, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t from 'tap';
import { canUseNetns, createLab } from '../helpers/netns.ts';

const exec = promisify(execFile);

if (!(await canUseNetns())) {
  t.fail('network namespaces need root with iproute2 and nftables (CI runs as root; `bash .ci/run` installs them)');
  process.exit(1);
}

const ID = 50;
const NETNS = fileURLToPath(new URL('../helpers/netns.ts', import.meta.url));
// A lab with a veth to the test's own namespace and a route to it: everything a run leaves.
const CHILD = `
const { createLab } = await import(${JSON.stringify(NETNS)});
const lab = await createLab({ teardown() {} }, ${ID}, ['far']);
await lab.link({ ns: null, addr: lab.ip(0, 1) }, { ns: 'far', addr: lab.ip(0, 2) });
await lab.routeFromHere(lab.ip(0, 2, false));
console.log(lab.ns('far'));
setInterval(() => {}, 1000);
`;

const netnsList = async () => (await exec('ip', ['netns', 'list'])).stdout;

t.test('a lab left by a killed run is removed by the next lab with its number', { timeout: 60_000 }, async (t) => {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CHILD], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((r) => child.once('exit', r));
  t.teardown(() => child.kill('SIGKILL'));
  const [leftNs] = (await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next()).value.split(' ') as [string];
  const tag = leftNs.split('-')[0] as string;
  t.match(await netnsList(), leftNs, 'the first run made its namespace');
  child.kill('SIGKILL');
  await exited;
  t.match(await netnsList(), leftNs, 'killed outright, it left the namespace behind');
  t.match((await exec('ip', ['-o', 'link', 'show'])).stdout, tag, 'and its veth');

  const lab = await createLab(t, ID, ['far']);
  t.notMatch(await netnsList(), leftNs, 'the next lab with its number removed the namespace');
  t.notMatch((await exec('ip', ['-o', 'link', 'show'])).stdout, new RegExp(`\\b${tag}`), 'and the veth');
  await lab.link({ ns: null, addr: lab.ip(0, 1) }, { ns: 'far', addr: lab.ip(0, 2) });
  await lab.routeFromHere(lab.ip(0, 2, false));
  const route = (await exec('ip', ['route', 'get', lab.ip(1, 9, false)])).stdout;
  t.match(route, `via ${lab.ip(0, 2, false)} dev ${lab.ns('far').split('-')[0]}`, 'and its own route took the place of the old one');
});

t.test('a lab number in use by a live process is refused, not taken over', { timeout: 30_000 }, async (t) => {
  await createLab(t, ID + 1, ['a']);
  await t.rejects(createLab(t, ID + 1, ['b']), /lab 51 is in use by process/);
});
