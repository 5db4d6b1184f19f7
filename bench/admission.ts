/**
 * `npm run bench -- admission [--requests 2000] [--hook-calls 200]`: what an admission rule adds to
 * each WHIP, WHEP and LL-HLS request on the media node — `AdmissionService.admit()`, the call the
 * routes make (rule lookup on the embedded store, cached per stream; then the gate) — beside the
 * same call for a stream without a rule, measured in the same run:
 * - `none`: no rule (the baseline every request pays);
 * - `hook, cached`: a hook rule whose decision for this client is cached (an LL-HLS player's
 *   requests after the first, within ADMISSION_CACHE_TTL);
 * - `jwt RS256 / ES256 / EdDSA`: a JWT rule with a PEM key (verified on every request, not cached);
 * - `hook, uncached`: a real HTTPS hook call to a receiver on loopback, each with a fresh query
 *   (what the first request of each client costs; a remote hook adds its network round trip).
 * Requests are sequential; p50/p95 in µs, and the ratio of each p50 to the baseline's.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createAccountWithKey } from '../control/ApiKeys.ts';
import type { AdmissionRequest } from '../media/index.ts';
import { createStore, type AdmissionRule, type StreamRecord } from '../store/index.ts';
import { ADMISSION_DEFAULTS, AdmissionGate, AdmissionService } from '../streams/index.ts';
import { AddressPolicy, SafeHttpClient } from '../outbound/index.ts';
import { keyPair, signJwt, type TestAlg } from '../test/helpers/jwt.ts';
import { makeTls, TestReceiver } from '../test/webhooks/helpers.ts';
import { printTable, summarize, writeResult, type Row } from './lib.ts';

export default async function admission(args: Map<string, string>): Promise<void> {
  const requests = Number(args.get('requests') ?? 2000);
  const hookCalls = Number(args.get('hook-calls') ?? 200);
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-bench-admission-'));
  const logger = pino({ level: 'silent' });
  const store = await createStore({ dataDir });
  const tls = makeTls();
  const receiver = await TestReceiver.start(tls);
  receiver.reply = () => ({ status: 204 });
  const policy = new AddressPolicy({ allowLoopback: true });
  const client = new SafeHttpClient({ policy, ca: tls.ca });
  const gate = new AdmissionGate({ client, settings: ADMISSION_DEFAULTS, logger });
  const service = new AdmissionService({ store, gate, policy, settings: ADMISSION_DEFAULTS, logger });

  try {
    const { account } = await createAccountWithKey(store, 'pro');
    let n = 0;
    const stream = async (rule: AdmissionRule | null): Promise<StreamRecord> => {
      n++;
      const now = new Date().toISOString();
      const s: StreamRecord = {
        id: `str_bench${n}`, accountId: account.id, name: '', pipeline: 'streamdiffusion', params: {} as StreamRecord['params'], streamKey: `sk_bench${n}`, playbackId: `pb_bench${n}`,
        outputRtmpUrl: null, fromPlayground: false, isSmokeTest: false, gatewayHost: '127.0.0.1', nodeId: null, state: 'created', createdAt: now, updatedAt: now,
        startedAt: null, endedAt: null, endReason: null, lastLiveAt: null, deleted: false, admission: rule,
      };
      await store.streams.create(s);
      return s;
    };
    const ask = (s: StreamRecord, over: Partial<AdmissionRequest> = {}): AdmissionRequest => ({ action: 'read', protocol: 'hls', streamId: s.id, clientIp: '198.51.100.7', query: {}, token: null, ...over });
    const time = async (count: number, make: (i: number) => AdmissionRequest): Promise<number[]> => {
      for (let i = 0; i < Math.min(50, count); i++) {
        const v = await service.admit(make(i)); // warm-up (and the first, uncached lookups)
        if (!v.admitted) throw new Error(`refused while warming up: ${v.reason}`);
      }
      const us: number[] = [];
      for (let i = 0; i < count; i++) {
        const req = make(i + 50);
        const t0 = performance.now();
        const v = await service.admit(req);
        us.push((performance.now() - t0) * 1000);
        if (!v.admitted) throw new Error(`refused: ${v.reason}`);
      }
      return us;
    };

    const cases: { name: string; samples: number[] }[] = [];
    const none = await stream(null);
    cases.push({ name: 'none (baseline)', samples: await time(requests, () => ask(none)) });
    const hook = await stream({ type: 'hook', url: receiver.url('/admit'), actions: ['read'] });
    cases.push({ name: 'hook, cached', samples: await time(requests, () => ask(hook)) });
    for (const alg of ['RS256', 'ES256', 'EdDSA'] as TestAlg[]) {
      const pair = keyPair(alg);
      const s = await stream({ type: 'jwt', publicKey: pair.pem, jwksUrl: null, actions: ['read'] });
      const token = signJwt(pair, { sub: s.playbackId, exp: Math.floor(Date.now() / 1000) + 3600 });
      cases.push({ name: `jwt ${alg}`, samples: await time(requests, () => ask(s, { token })) });
    }
    const before = receiver.requests.length;
    cases.push({ name: 'hook, uncached (loopback HTTPS)', samples: await time(hookCalls, (i) => ask(hook, { query: { n: String(i) } })) });
    if (receiver.requests.length - before < hookCalls) throw new Error('uncached hook calls were answered from the cache');

    const base = summarize(cases[0]!.samples).p50;
    const rows: Row[] = cases.map(({ name, samples }) => {
      const s = summarize(samples);
      return { case: name, n: s.n, p50_us: s.p50, p95_us: s.p95, p99_us: s.p99, 'p50 / baseline': s.p50 / base };
    });
    printTable('admit() per request (sequential, µs)', rows);
    console.log(`\nwrote ${writeResult('admission', { requests, hookCalls, rows })}`);
  } finally {
    client.close();
    await receiver.close();
    tls.cleanup();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
