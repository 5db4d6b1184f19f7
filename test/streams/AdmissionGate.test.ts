/**
 * AdmissionGate against a real HTTPS hook receiver on loopback (test CA), through the webhooks'
 * SafeHttpClient: concurrent requests of one client share one hook call; a decision is reused for
 * its TTL (the gate's clock is moved, nothing sleeps) and per client, token and query; a redirect
 * is not followed and refuses; a hook on a private address is never dialled; without a rule, or
 * for an action the rule does not name, nothing is called.
 */
import pino from 'pino';
import t, { type Test } from 'tap';
import type { AdmissionRule } from '../../store/index.ts';
import { AdmissionGate, ADMISSION_DEFAULTS, type GateRequest } from '../../streams/AdmissionGate.ts';
import { AddressPolicy, SafeHttpClient } from '../../outbound/index.ts';
import { makeTls, TestReceiver } from '../webhooks/helpers.ts';

async function setup(t: Test) {
  const tls = makeTls();
  t.teardown(() => tls.cleanup());
  const receiver = await TestReceiver.start(tls);
  t.teardown(() => receiver.close());
  const client = new SafeHttpClient({ policy: new AddressPolicy({ allowLoopback: true }), ca: tls.ca });
  t.teardown(() => client.close());
  let now = 1_000_000;
  const gate = new AdmissionGate({ client, settings: { ...ADMISSION_DEFAULTS, hookTimeoutMs: 1000 }, logger: pino({ level: 'silent' }), now: () => now });
  return { receiver, gate, advance: (ms: number) => (now += ms) };
}

const req = (over: Partial<GateRequest> = {}): GateRequest => ({ action: 'read', protocol: 'hls', streamId: 'str_a', playbackId: 'pb_a', clientIp: '198.51.100.7', query: {}, token: null, ...over });

t.test('concurrent requests of one client share one hook call; the decision lasts its TTL, per client, token and query', { timeout: 30_000 }, async (t) => {
  const { receiver, gate, advance } = await setup(t);
  receiver.reply = () => ({ status: 204, delayMs: 200 });
  const rule: AdmissionRule = { type: 'hook', url: receiver.url('/admit'), actions: ['read'] };
  const verdicts = await Promise.all(Array.from({ length: 20 }, () => gate.decide(rule, req())));
  t.ok(verdicts.every((v) => v.admitted), 'all admitted');
  t.equal(receiver.requests.length, 1, '20 concurrent requests, one hook call');
  advance(ADMISSION_DEFAULTS.decisionTtlMs - 1);
  await gate.decide(rule, req({ query: {} }));
  t.equal(receiver.requests.length, 1, 'reused within the TTL');
  await gate.decide(rule, req({ clientIp: '198.51.100.8' }));
  await gate.decide(rule, req({ token: 't' }));
  await gate.decide(rule, req({ query: { user: 'b' } }));
  t.equal(receiver.requests.length, 4, 'another client, token or query is asked for');
  advance(2);
  await gate.decide(rule, req());
  t.equal(receiver.requests.length, 5, 'after the TTL the hook is asked again');
});

t.test('a redirect refuses and is not followed; a private hook address is never dialled; no rule, no call', { timeout: 30_000 }, async (t) => {
  const { receiver, gate } = await setup(t);
  receiver.reply = (r) => (r.path === '/moved' ? { status: 307, headers: { location: receiver.url('/admit') } } : { status: 200 });
  const moved = await gate.decide({ type: 'hook', url: receiver.url('/moved'), actions: ['read'] }, req());
  t.same(moved, { admitted: false, status: 403, reason: 'refused by the admission hook (HTTP 307)' });
  t.same(receiver.requests.map((r) => r.path), ['/moved'], 'the redirect target was not asked');
  const privateHook = await gate.decide({ type: 'hook', url: 'https://10.0.0.1/admit', actions: ['read'] }, req());
  t.same(privateHook, { admitted: false, status: 403, reason: 'the admission hook could not be reached' });
  t.equal(gate.hookCalls, 2, 'two decisions asked for');
  t.same(await gate.decide(null, req()), { admitted: true }, 'no rule admits');
  t.same(await gate.decide({ type: 'hook', url: receiver.url('/admit'), actions: ['publish'] }, req()), { admitted: true }, 'an action the rule does not name is admitted');
  t.equal(receiver.requests.length, 1, 'and neither called the hook');
});
