import t from 'tap';
import { AddressPolicy } from '../../outbound/index.ts';
import type { Resolver } from '../../outbound/index.ts';
import { SafeHttpClient, SafeHttpError } from '../../outbound/index.ts';
import { makeTls, TestReceiver } from '../webhooks/helpers.ts';

const tls = makeTls();
t.teardown(() => tls.cleanup());

async function setup(t: { teardown: (fn: () => unknown) => void }, opts: { allowLoopback?: boolean; resolve?: Resolver; ca?: boolean } = {}) {
  const receiver = await TestReceiver.start(tls);
  const client = new SafeHttpClient({
    allowLoopback: opts.allowLoopback ?? true,
    ...(opts.resolve ? { resolve: opts.resolve } : {}),
    ...(opts.ca === false ? {} : { ca: tls.ca }),
  });
  t.teardown(async () => {
    client.close();
    await receiver.close();
  });
  return { receiver, client };
}

async function failure(p: Promise<unknown>): Promise<SafeHttpError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  if (!(err instanceof SafeHttpError)) throw new Error(`expected SafeHttpError, got ${String(err)}`);
  return err;
}

void t.test('with the test switch, a POST reaches the loopback receiver over TLS with our CA', { timeout: 15_000 }, async (t) => {
  const { receiver, client } = await setup(t);
  receiver.reply = () => ({ status: 201, body: 'created' });
  const res = await client.request(receiver.url(), { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"a":1}' });
  t.equal(res.status, 201);
  t.equal(res.body.toString(), 'created');
  t.equal(res.remoteAddress, '127.0.0.1');
  t.equal(receiver.requests[0]?.body, '{"a":1}');
  t.equal(receiver.requests[0]?.method, 'POST');
});

void t.test('by default loopback is refused before any byte is sent, literal or by name', { timeout: 15_000 }, async (t) => {
  const { receiver } = await setup(t);
  const strict = new SafeHttpClient({ ca: tls.ca, resolve: async () => [{ address: '127.0.0.1', family: 4 }] });
  t.teardown(() => strict.close());
  for (const url of [receiver.url(), receiver.url('/', 'receiver.test'), `https://2130706433:${receiver.port}/`, `https://localhost:${receiver.port}/`]) {
    const err = await failure(strict.request(url));
    t.equal(err.kind, 'blocked_address', url);
  }
  t.equal(receiver.requests.length, 0, 'the receiver saw nothing');
});

void t.test('an untrusted certificate fails as tls', { timeout: 15_000 }, async (t) => {
  const { receiver, client } = await setup(t, { ca: false });
  const err = await failure(client.request(receiver.url()));
  t.equal(err.kind, 'tls');
});

void t.test('plain http is refused unless allowed', { timeout: 15_000 }, async (t) => {
  const { receiver, client } = await setup(t);
  const err = await failure(client.request(`http://127.0.0.1:${receiver.port}/`));
  t.equal(err.kind, 'invalid_url');
  const creds = await failure(client.request(`https://u:p@127.0.0.1:${receiver.port}/`));
  t.equal(creds.kind, 'invalid_url');
});

void t.test('a 3xx is returned as is and its Location is never visited', { timeout: 15_000 }, async (t) => {
  const { receiver, client } = await setup(t);
  receiver.reply = (r) => (r.path === '/moved' ? { status: 308, headers: { location: receiver.url('/target') } } : { status: 200 });
  const res = await client.request(receiver.url('/moved'), { method: 'POST', body: 'x' });
  t.equal(res.status, 308);
  t.same(
    receiver.requests.map((r) => r.path),
    ['/moved'],
    'the redirect target got no request',
  );
});

void t.test('a receiver that never answers is cut at timeoutMs', { timeout: 15_000 }, async (t) => {
  const { receiver, client } = await setup(t);
  receiver.reply = () => 'hang';
  const started = performance.now();
  const err = await failure(client.request(receiver.url(), { method: 'POST', body: 'x', timeoutMs: 300 }));
  const took = performance.now() - started;
  t.equal(err.kind, 'timeout');
  t.ok(took >= 290 && took < 2_000, `cut after ${Math.round(took)} ms`);
});

void t.test('the default deadline is 10 s for a receiver that hangs', { timeout: 20_000 }, async (t) => {
  const { receiver, client } = await setup(t);
  receiver.reply = () => 'hang';
  const started = performance.now();
  const err = await failure(client.request(receiver.url(), { method: 'POST', body: 'x' }));
  const took = performance.now() - started;
  t.equal(err.kind, 'timeout');
  t.ok(took >= 9_950 && took < 11_000, `cut after ${Math.round(took)} ms`);
});

void t.test('a slow body counts toward the same deadline', { timeout: 15_000 }, async (t) => {
  const { receiver, client } = await setup(t);
  // Headers at once, body never finishes.
  receiver.server.removeAllListeners('request');
  receiver.server.on('request', (_req, res) => {
    res.writeHead(200);
    res.write('partial');
  });
  const err = await failure(client.request(receiver.url(), { timeoutMs: 300 }));
  t.equal(err.kind, 'timeout');
});

void t.test('the body kept is capped at maxResponseBytes', { timeout: 15_000 }, async (t) => {
  const { receiver, client } = await setup(t);
  receiver.reply = () => ({ status: 200, body: 'y'.repeat(100_000) });
  const res = await client.request(receiver.url(), { maxResponseBytes: 4096 });
  t.equal(res.body.length, 4096);
  t.equal(res.truncated, true);
  const small = await client.request(receiver.url(), { maxResponseBytes: 200_000 });
  t.equal(small.body.length, 100_000);
  t.equal(small.truncated, false);
});

void t.test('connection refused is a connection error', { timeout: 15_000 }, async (t) => {
  const { receiver, client } = await setup(t);
  const port = receiver.port;
  await receiver.close();
  const err = await failure(client.request(`https://127.0.0.1:${port}/`));
  t.equal(err.kind, 'connection');
});

void t.test('DNS is checked when each connection is made: a name that turns private is refused (rebinding)', { timeout: 15_000 }, async (t) => {
  let answer = '127.0.0.1';
  let lookups = 0;
  const resolve: Resolver = async () => {
    lookups++;
    return [{ address: answer, family: 4 }];
  };
  // Loopback stands in for "public" here (the switch admits it); 10.0.0.1 stays refused.
  const { receiver, client } = await setup(t, { resolve });
  receiver.reply = () => ({ status: 200, body: 'ok', headers: { connection: 'close' } });
  const first = await client.request(receiver.url('/', 'rebind.example.com'));
  t.equal(first.status, 200);
  t.equal(lookups, 1);
  answer = '10.0.0.1';
  const err = await failure(client.request(receiver.url('/', 'rebind.example.com')));
  t.equal(err.kind, 'blocked_address');
  t.match(err.message, /10\.0\.0\.1.*private/);
  t.equal(lookups, 2, 'the second connection resolved again');
  t.equal(receiver.requests.length, 1, 'nothing reached the receiver after the rebind');
});

void t.test('IP literals skip DNS and are checked directly, including IPv6 loopback', { timeout: 15_000 }, async (t) => {
  let lookups = 0;
  const policy = new AddressPolicy({
    resolve: async () => {
      lookups++;
      return [];
    },
  });
  const client = new SafeHttpClient({ policy, ca: tls.ca });
  t.teardown(() => client.close());
  for (const url of ['https://[::1]:1/', 'https://169.254.169.254/', 'https://[::ffff:7f00:1]/', 'https://0x7f.1:1/']) {
    t.equal((await failure(client.request(url))).kind, 'blocked_address', url);
  }
  t.equal(lookups, 0);
});

void t.test('the guarded lookup answers {all:true}, family and callback-only forms', { timeout: 10_000 }, async (t) => {
  const policy = new AddressPolicy({
    resolve: async () => [
      { address: '93.184.216.34', family: 4 },
      { address: '2606:4700:4700::1111', family: 6 },
    ],
  });
  const all = await new Promise<unknown>((resolve, reject) =>
    policy.lookup('x.example.com', { all: true }, (err, addrs) => (err ? reject(err) : resolve(addrs))),
  );
  t.same(all, [
    { address: '93.184.216.34', family: 4 },
    { address: '2606:4700:4700::1111', family: 6 },
  ]);
  const v6 = await new Promise<string>((resolve, reject) => policy.lookup('x.example.com', 6, (err, a) => (err ? reject(err) : resolve(a))));
  t.equal(v6, '2606:4700:4700::1111');
  const one = await new Promise<string>((resolve, reject) => policy.lookup('x.example.com', (err, a) => (err ? reject(err) : resolve(a))));
  t.equal(one, '93.184.216.34');
});
