/**
 * Hostile requests generated from our own /openapi.json against a real server (every role, the
 * embedded store, real HTTP on loopback): every operation, with missing and garbage auth, garbage
 * ids, wrong types, boundary values, deep nesting, huge strings, malformed JSON and bad UTF-8,
 * wrong content types, and broken SDP on the WHIP/WHEP routes: real offers and sdpfrags with lines
 * dropped, duplicated and swapped, numbers out of range and garbage in each attribute. A fixed seed makes a failure
 * reproducible (FUZZ_SEED=… to explore others; FUZZ_CASES per operation, default 110).
 *
 * Every answer must be: no 5xx (a 503 only with Retry-After: capacity and outages are real
 * answers); on the API areas a 4xx in the area's documented shape; no stack trace or server path
 * in any body. Afterwards the server still answers its health check and real requests.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { loadConfig } from '../../control/config.ts';
import { startServer } from '../../control/Server.ts';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { freePort } from '../helpers/net.ts';

type Json = Record<string, any>;
type Schema = Json;

const SEED = Number(process.env['FUZZ_SEED'] ?? 20261125);
const CASES = Number(process.env['FUZZ_CASES'] ?? 110);

/** mulberry32: small, seedable, good enough to pick cases. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

t.test('thousands of hostile requests from /openapi.json: no 5xx, the area shape on every 4xx, nothing leaked, server healthy', { timeout: 600_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-fuzz-'));
  const port = await freePort();
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: port, HOST: '127.0.0.1', PUBLIC_URL: `http://127.0.0.1:${port}`, LOG_LEVEL: 'silent' });
  // WHIP/WHEP rate limits raised so every hostile SDP body reaches the offer checks (they are tested in AttachLimits).
  const server = await startServer(config, { logger: pino({ level: 'silent' }), mediaSettings: { whipPerAddressPerMinute: 1e6, whepPerAddressPerMinute: 1e6, whepPerPlaybackPerMinute: 1e6 } });
  t.teardown(async () => {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const { key } = await createAccountWithKey(server.store, 'pro');
  const { key: otherKey } = await createAccountWithKey(server.store, 'free');
  const base = server.url;
  const authed = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };

  // Real resources, so some requests reach deep into the handlers.
  const stream = (await (await fetch(`${base}/v1/streams`, { method: 'POST', headers: authed, body: JSON.stringify({ params: { prompt: 'fuzz' } }) })).json()) as Json;
  const song = (await (await fetch(`${base}/music/v1/songs`, { method: 'POST', headers: authed, body: JSON.stringify({ prompt: 'fuzz', duration: 10 }) })).json()) as Json;
  t.match(stream['id'], /^str_/, 'a real stream to aim at');
  t.match(song['id'] ?? song['data']?.[0]?.['id'] ?? song['songs']?.[0]?.['id'] ?? JSON.stringify(song), /sng_/, 'a real song to aim at');
  const songId = /sng_[A-Za-z0-9_-]+/.exec(JSON.stringify(song))?.[0] ?? 'sng_x';

  const doc = (await (await fetch(`${base}/openapi.json`)).json()) as Json;
  const resolve = (s: Schema | undefined): Schema => {
    let cur: Schema = s !== null && typeof s === 'object' ? s : {};
    for (let i = 0; i < 10 && typeof cur['$ref'] === 'string'; i++) cur = doc['components']['schemas'][String(cur['$ref']).split('/').pop() as string] ?? {};
    return cur;
  };

  const rand = rng(SEED);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  const chance = (p: number) => rand() < p;

  const HUGE = 'x'.repeat(100_000);
  const STRINGS = ['', ' ', 'a', HUGE, '\u0000', '\ud800', '../../etc/passwd', '%zz', '${jndi:x}', '<script>alert(1)</script>', "'; DROP TABLE x;--", 'ünïcødé 🎵', 'https://127.0.0.1/x', 'rtmp://10.0.0.1/app/k', 'str_' + 'a'.repeat(300)];
  const NUMBERS = [0, -1, 1, 0.5, -0.0001, 1e308, -1e308, 2 ** 53, 2 ** 53 + 2, 99999999999999999999, 255, 256, 1025, 65536];
  const ODD = [null, true, false, [], {}, [[[]]], { a: { b: { c: 1 } } }, ...NUMBERS.slice(0, 4), ...STRINGS.slice(0, 5)];

  /** A plausible value for a schema (then mutated). Depth-bounded. */
  const gen = (raw: Schema | undefined, depth = 0): unknown => {
    const s = resolve(raw);
    if (depth > 6) return null;
    const alts = (s['anyOf'] ?? s['oneOf']) as Schema[] | undefined;
    if (alts?.length) return gen(pick(alts), depth + 1);
    if ('const' in s) return s['const'];
    if (Array.isArray(s['enum'])) return pick(s['enum'] as unknown[]);
    const type = Array.isArray(s['type']) ? pick(s['type'] as string[]) : s['type'];
    switch (type) {
      case 'object': {
        const out: Json = {};
        const required = new Set((s['required'] as string[] | undefined) ?? []);
        for (const [k, v] of Object.entries((s['properties'] as Record<string, Schema> | undefined) ?? {})) {
          if (required.has(k) || chance(0.5)) out[k] = gen(v, depth + 1);
        }
        return out;
      }
      case 'array': {
        const n = Math.min(Number(s['minItems'] ?? 0) + Math.floor(rand() * 3), Number(s['maxItems'] ?? 3));
        return Array.from({ length: n }, () => gen(s['items'] as Schema, depth + 1));
      }
      case 'integer':
      case 'number': {
        const lo = Number(s['minimum'] ?? s['exclusiveMinimum'] ?? 0);
        const hi = Number(s['maximum'] ?? s['exclusiveMaximum'] ?? lo + 100);
        const v = lo + rand() * (hi - lo);
        return type === 'integer' ? Math.round(v) : v;
      }
      case 'boolean':
        return chance(0.5);
      case 'string':
        if (s['format'] === 'uri') return pick(['https://127.0.0.1/hook', 'rtmp://127.0.0.1/live/k', 'https://[::1]/x', 'https://10.1.2.3/x']);
        return 'a'.repeat(Math.max(1, Number(s['minLength'] ?? 1)));
      default:
        return pick(ODD);
    }
  };

  /** One mutation somewhere in `v`: wrong type, boundary, huge, removed or extra field. */
  const mutate = (v: unknown, depth = 0): unknown => {
    if (v !== null && typeof v === 'object' && depth < 6 && chance(0.7)) {
      const entries = Object.entries(v as Json);
      if (Array.isArray(v)) return entries.length && chance(0.7) ? v.map((x, i) => (i === 0 ? mutate(x, depth + 1) : x)) : [...v, pick(ODD)];
      if (entries.length && chance(0.7)) {
        const [k] = pick(entries);
        const copy = { ...(v as Json) };
        if (chance(0.15)) delete copy[k];
        else copy[k] = mutate(copy[k], depth + 1);
        return copy;
      }
      return { ...(v as Json), [pick(['__proto__', 'constructor', 'unknown_field', 'x'.repeat(300)])]: pick(ODD) };
    }
    if (typeof v === 'number') return pick([...NUMBERS, -v, v + 1e-9, String(v)]);
    if (typeof v === 'string') return pick([...STRINGS, v + HUGE, v.toUpperCase(), 42]);
    return pick(ODD);
  };

  const deep = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
  const OFFER = [
    'v=0',
    'o=- 1 2 IN IP4 127.0.0.1',
    's=-',
    't=0 0',
    'a=group:BUNDLE 0',
    'm=video 9 UDP/TLS/RTP/SAVPF 96',
    'c=IN IP4 0.0.0.0',
    'a=mid:0',
    'a=sendonly',
    'a=ice-ufrag:abcd',
    'a=ice-pwd:abcdefghijklmnopqrstuvwx',
    'a=fingerprint:sha-256 ' + Array.from({ length: 32 }, () => 'AB').join(':'),
    'a=setup:actpass',
    'a=rtcp-mux',
    'a=rtpmap:96 H264/90000',
  ].join('\r\n');
  const SDPS = [
    '',
    'v=0',
    'garbage',
    OFFER.replace('96 H264', '99999999999999999999 H264').replace('SAVPF 96', 'SAVPF 99999999999999999999'),
    `${OFFER}\r\na=candidate:garbage\r\n`,
    `${OFFER}\r\na=candidate:1 1 udp 1 127.0.0.1 9 typ host\r\n`,
    OFFER.replace('m=video 9', 'm=video 99999999'),
    `${OFFER}\r\n${'m=video 9 UDP/TLS/RTP/SAVPF 96\r\n'.repeat(500)}`,
    OFFER.replace(/\r\n/g, '\n'),
    `${OFFER}\r\na=rtpmap:96 ${HUGE}\r\n`,
    'a=ice-ufrag:x\r\na=ice-pwd:y\r\na=candidate:1 1 UDP 1 169.254.169.254 80 typ host\r\n',
  ];

  /** A Chrome-like offer (audio + video, extensions, ssrcs, a candidate) that the node accepts as is. */
  const realOffer = (direction: 'sendonly' | 'recvonly') =>
    [
      'v=0',
      'o=- 4611731400430051336 2 IN IP4 127.0.0.1',
      's=-',
      't=0 0',
      'a=group:BUNDLE 0 1',
      'a=extmap-allow-mixed',
      'a=msid-semantic: WMS',
      'm=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8',
      'c=IN IP4 0.0.0.0',
      'a=rtcp:9 IN IP4 0.0.0.0',
      'a=candidate:1467250027 1 udp 2122260223 192.0.2.10 46243 typ host generation 0 network-id 1',
      'a=ice-ufrag:Fz2n',
      'a=ice-pwd:3Jr0nUP6vKMYD7BdQHqkvC2q',
      'a=ice-options:trickle',
      `a=fingerprint:sha-256 ${Array.from({ length: 32 }, (_, i) => (i * 7 + 16).toString(16).toUpperCase().padStart(2, '0')).join(':')}`,
      'a=setup:actpass',
      'a=mid:0',
      'a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level',
      'a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid',
      `a=${direction}`,
      'a=msid:- 0c8b4b4d-7f5e-4f1f-9a4e-2b1f1f0e6c11',
      'a=rtcp-mux',
      'a=rtpmap:111 opus/48000/2',
      'a=rtcp-fb:111 transport-cc',
      'a=fmtp:111 minptime=10;useinbandfec=1',
      'a=rtpmap:63 red/48000/2',
      'a=fmtp:63 111/111',
      'a=rtpmap:9 G722/8000',
      'a=rtpmap:0 PCMU/8000',
      'a=rtpmap:8 PCMA/8000',
      'a=ssrc:1001 cname:fuzzcname',
      'm=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103',
      'c=IN IP4 0.0.0.0',
      'a=rtcp:9 IN IP4 0.0.0.0',
      'a=ice-ufrag:Fz2n',
      'a=ice-pwd:3Jr0nUP6vKMYD7BdQHqkvC2q',
      'a=ice-options:trickle',
      `a=fingerprint:sha-256 ${Array.from({ length: 32 }, (_, i) => (i * 7 + 16).toString(16).toUpperCase().padStart(2, '0')).join(':')}`,
      'a=setup:actpass',
      'a=mid:1',
      'a=extmap:2 urn:ietf:params:rtp-hdrext:toffset',
      'a=extmap:3 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time',
      `a=${direction}`,
      'a=msid:- 5d1c1d57-1e0f-4a8e-8f0b-7b0e6c2f4a21',
      'a=rtcp-mux',
      'a=rtcp-rsize',
      'a=rtpmap:96 VP8/90000',
      'a=rtcp-fb:96 goog-remb',
      'a=rtcp-fb:96 nack',
      'a=rtcp-fb:96 nack pli',
      'a=rtpmap:97 rtx/90000',
      'a=fmtp:97 apt=96',
      'a=rtpmap:102 H264/90000',
      'a=rtcp-fb:102 nack',
      'a=rtcp-fb:102 nack pli',
      'a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f',
      'a=rtpmap:103 rtx/90000',
      'a=fmtp:103 apt=102',
      'a=ssrc-group:FID 2001 2002',
      'a=ssrc:2001 cname:fuzzcname',
      'a=ssrc:2002 cname:fuzzcname',
    ];
  const realFrag = ['a=ice-ufrag:Fz2n', 'a=ice-pwd:3Jr0nUP6vKMYD7BdQHqkvC2q', 'm=audio 9 UDP/TLS/RTP/SAVPF 0', 'a=mid:0', 'a=candidate:1 1 udp 2122260223 192.0.2.10 5000 typ host', 'a=end-of-candidates'];
  const BAD_NUMBERS = ['-1', '0', '128', '256', '65536', '99999999', '4294967296', '99999999999999999999', '1e3', '0x10', '', '٣'];
  const GARBAGE = ['', ' ', 'ZZ:ZZ', '\u0000', 'x'.repeat(300), '../../etc/passwd', '%zz', 'ünïcødé', '💥', ':::', 'a b c d e f g h', '\t', 'sha-256', '-', '*'];
  /** 1–3 structural mutations of a real SDP: drop, duplicate, swap lines, numbers out of range, garbage in attribute values, cut short. */
  const mutateSdp = (lines: string[]): string => {
    const out = [...lines];
    const n = 1 + Math.floor(rand() * 3);
    for (let k = 0; k < n; k++) {
      const i = Math.floor(rand() * out.length);
      const line = out[i] ?? '';
      const r = rand();
      if (r < 0.15) out.splice(i, 1);
      else if (r < 0.27) out.splice(i, 0, line);
      else if (r < 0.34) out.splice(Math.floor(rand() * out.length), 0, out.splice(i, 1)[0] ?? '');
      else if (r < 0.62) {
        const nums = [...line.matchAll(/\d+/g)];
        const m = nums.length ? pick(nums) : undefined;
        out[i] = m ? line.slice(0, m.index) + pick(BAD_NUMBERS) + line.slice((m.index ?? 0) + m[0].length) : line + pick(BAD_NUMBERS);
      } else if (r < 0.88) {
        const at = line.indexOf(':');
        const fields = line.slice(at + 1).split(' ');
        fields[Math.floor(rand() * fields.length)] = pick(GARBAGE);
        out[i] = at > 0 ? `${line.slice(0, at + 1)}${fields.join(' ')}` : `${line.slice(0, 2)}${pick(GARBAGE)}`;
      } else if (r < 0.94) out[i] = `${pick(['x', 'a', 'm', 'v', 'A', '=', ' '])}${line.slice(1)}`;
      else return out.join('\r\n').slice(0, Math.floor(rand() * out.join('\r\n').length));
    }
    return `${out.join(pick(['\r\n', '\r\n', '\r\n', '\n']))}\r\n`;
  };

  const leaks = [dataDir, process.cwd(), '/root/', '/home/', 'node_modules'];
  const failures: string[] = [];
  let sent = 0;
  const statuses = new Map<number, number>();

  const ops: { method: string; path: string; op: Json }[] = [];
  for (const [path, methods] of Object.entries(doc['paths'] as Record<string, Json>)) {
    for (const [method, op] of Object.entries(methods)) ops.push({ method: method.toUpperCase(), path, op: op as Json });
  }
  t.ok(ops.length >= 25, `${ops.length} operations in /openapi.json`);

  for (const { method, path, op } of ops) {
    const music = path.startsWith('/music/');
    const live = path.startsWith('/live/');
    for (let i = 0; i < CASES; i++) {
      // Path: a real id, or garbage.
      const realId = path.includes('/songs/') ? songId : path.includes('whep') ? String(stream['output_playback_id'] ?? 'x') : String(stream['id']);
      const url =
        base +
        path.replace(/\{(\w+)\}/g, (_m, name: string) => {
          if (name === 'file') return pick(['1.mp3', '2.wav', '3.mp3', '1.ogg', 'x', '%00', '..%2F..%2Fetc', HUGE.slice(0, 500)]);
          return chance(0.5) ? realId : pick(['%zz', '%E0%A4%A', 'bykey:x', 'queued', 'x'.repeat(250), '..%2F..', '%00', 'sng_%F0%9F%8E%B5', 'str_x', '0', '-1']);
        });
      // Query: from the spec's parameters, sometimes garbage.
      const q = new URLSearchParams();
      for (const p of (op['parameters'] as Json[] | undefined) ?? []) {
        if (p['in'] !== 'query' || !chance(0.6)) continue;
        q.set(p['name'], String(chance(0.5) ? gen(p['schema']) : pick(['-1', '0', '1e309', 'NaN', '[]', HUGE.slice(0, 3000), '%zz', 'abc'])));
      }
      const fullUrl = q.size ? `${url}?${q}` : url;
      // Auth.
      const auth = pick([`Bearer ${key}`, `Bearer ${key}`, `Bearer ${otherKey}`, undefined, 'Bearer garbage', 'Basic Zm9vOmJhcg==', `Bearer ${HUGE.slice(0, 5000)}`, 'Bearer', live ? `Bearer ${String(stream['stream_key'])}` : `Bearer ${key}`]);
      // Body.
      let body: string | Blob | undefined;
      let type: string | undefined;
      const bodySchema = (op['requestBody'] as Json | undefined)?.['content']?.['application/json']?.['schema'] as Schema | undefined;
      if (live && (method === 'POST' || method === 'PATCH')) {
        body = chance(0.3) ? pick(SDPS) : mutateSdp(method === 'PATCH' ? realFrag : realOffer(path.includes('whep') ? 'recvonly' : 'sendonly'));
        type = pick(['application/sdp', 'application/sdp', 'application/trickle-ice-sdpfrag', 'text/plain', undefined]);
      } else if (bodySchema || method === 'POST' || method === 'PATCH') {
        const valid = bodySchema ? gen(bodySchema) : {};
        const kind = rand();
        if (kind < 0.55) body = JSON.stringify(mutate(valid));
        else if (kind < 0.65) body = JSON.stringify(valid);
        else if (kind < 0.72) body = JSON.stringify(valid).slice(0, -1); // malformed
        else if (kind < 0.78) body = new Blob([Buffer.from('{"prompt":"'), Buffer.from([0xff, 0xfe, 0xc3, 0x28]), Buffer.from('"}')]); // bad UTF-8
        else if (kind < 0.83) body = `{"params":{"controlnets":[{"preprocessor_params":${deep(3000)}}]},"a":${deep(3000)}}`;
        else if (kind < 0.87) body = JSON.stringify({ prompt: 'x'.repeat(2 * 1024 * 1024) }); // over the body limit
        else if (kind < 0.92) body = '';
        else body = JSON.stringify(pick(ODD));
        type = pick(['application/json', 'application/json', 'application/json', 'application/json; charset=latin1', 'text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=utf-8', undefined]);
      }
      const headers: Record<string, string> = {};
      if (auth !== undefined) headers['authorization'] = auth;
      if (type !== undefined && body !== undefined) headers['content-type'] = type;
      if (chance(0.1)) headers['if-match'] = pick(['*', '"x"', HUGE.slice(0, 1000)]);
      if (chance(0.05)) headers['traceparent'] = pick(['garbage', '00-' + '0'.repeat(32) + '-' + '0'.repeat(16) + '-01']);

      let res: Response;
      let text: string;
      try {
        res = await fetch(fullUrl, { method, headers, ...(body !== undefined && method !== 'GET' && method !== 'OPTIONS' ? { body } : {}), signal: AbortSignal.timeout(30_000) });
        text = await res.text();
      } catch (err) {
        failures.push(`${method} ${path} #${i}: request failed: ${String(err).slice(0, 200)}`);
        continue;
      }
      sent++;
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      const what = `${method} ${fullUrl.slice(base.length, base.length + 120)} [${type ?? '-'}] → ${res.status}`;
      // WHIP/WHEP: never a 5xx (one stream, so no capacity to run out of; bad SDP is the client's fault).
      if (res.status >= 500 && (live || !(res.status === 503 && res.headers.get('retry-after')))) failures.push(`${what}: ${text.slice(0, 300)}`);
      if (/\bat [\w.<>]+ \(|\.ts:\d+:\d+|\.js:\d+:\d+/.test(text)) failures.push(`${what}: a stack trace in the body: ${text.slice(0, 300)}`);
      const leaked = leaks.find((l) => text.includes(l));
      if (leaked) failures.push(`${what}: the body names ${leaked}`);
      if (res.status >= 400 && !live && (res.headers.get('content-type') ?? '').includes('json')) {
        let j: Json;
        try {
          j = JSON.parse(text) as Json;
        } catch {
          failures.push(`${what}: a JSON content type with a body that is not JSON`);
          continue;
        }
        if (music && Object.keys(j).sort().join(',') !== 'error,message') failures.push(`${what}: not the Error record: ${text.slice(0, 200)}`);
        if (!music && (j['success'] !== false || j['status'] !== res.status || typeof j['code'] !== 'string')) failures.push(`${what}: not the envelope: ${text.slice(0, 200)}`);
      } else if (res.status >= 400 && !live) {
        failures.push(`${what}: a ${res.status} that is not JSON (${res.headers.get('content-type')}): ${text.slice(0, 120)}`);
      }
      if (failures.length > 50) break;
    }
  }
  // The SDP bodies of WHIP (with the stream key) and WHEP (keyless), mutated from real offers:
  // every answer a 4xx naming the problem or a 201, never a 5xx, and no stream made for a bad one.
  // A stream of its own: the requests above may have deleted the first one.
  const target = (await (await fetch(`${base}/v1/streams`, { method: 'POST', headers: authed, body: JSON.stringify({ params: { prompt: 'sdp fuzz' } }) })).json()) as Json;
  t.match(target['id'], /^str_/, 'a fresh stream to aim the offers at');
  const whipUrl = `${base}/live/${String(target['id'])}/whip`;
  const whepUrl = `${base}/live/${String(target['output_playback_id'])}/whep`;
  const streamsHeld = async () => Number(/^reverie_media_streams (\d+)/m.exec(await (await fetch(`${base}/metrics`)).text())?.[1] ?? NaN);
  const heldBefore = await streamsHeld();
  const sdpPost = (url: string, sdp: string, keyed: boolean) =>
    fetch(url, { method: 'POST', headers: { 'content-type': 'application/sdp', ...(keyed ? { authorization: `Bearer ${String(target['stream_key'])}` } : {}) }, body: sdp, signal: AbortSignal.timeout(30_000) });
  const whepOk = await sdpPost(whepUrl, `${realOffer('recvonly').join('\r\n')}\r\n`, false);
  t.equal(whepOk.status, 201, `the unmutated WHEP offer is accepted (${(await whepOk.text()).trim().slice(0, 200)})`);
  const whipOk = await sdpPost(whipUrl, `${realOffer('sendonly').join('\r\n')}\r\n`, true);
  t.equal(whipOk.status, 201, `the unmutated WHIP offer is accepted (${(await whipOk.text()).trim().slice(0, 200)})`);
  const sdpStatuses = new Map<number, number>();
  let sdpSent = 0;
  for (let i = 0; i < CASES * 3; i++) {
    for (const role of ['whip', 'whep'] as const) {
      const sdp = mutateSdp(realOffer(role === 'whip' ? 'sendonly' : 'recvonly'));
      let res: Response;
      let text: string;
      try {
        res = await sdpPost(role === 'whip' ? whipUrl : whepUrl, sdp, role === 'whip');
        text = await res.text();
      } catch (err) {
        failures.push(`${role} SDP #${i}: request failed: ${String(err).slice(0, 200)}`);
        continue;
      }
      sdpSent++;
      sdpStatuses.set(res.status, (sdpStatuses.get(res.status) ?? 0) + 1);
      if (res.status >= 500) failures.push(`${role} SDP #${i} → ${res.status}: ${text.slice(0, 200)}\n${sdp.slice(0, 3000)}`);
      else if (res.status >= 400 && res.status !== 429 && text.trim().length < 8) failures.push(`${role} SDP #${i} → ${res.status} without a reason`);
      if (/\bat [\w.<>]+ \(|\.ts:\d+:\d+|\.js:\d+:\d+/.test(text)) failures.push(`${role} SDP #${i}: a stack trace in the body`);
    }
    if (failures.length > 50) break;
  }
  t.comment(`SDP: ${sdpSent} mutated WHIP/WHEP offers; statuses ${JSON.stringify(Object.fromEntries([...sdpStatuses].sort(([a], [b]) => a - b)))}`);
  t.ok(sdpSent >= CASES * 6 * 0.95, `${sdpSent} mutated offers answered`);
  t.notOk([...sdpStatuses.keys()].some((s) => s >= 500), 'no 5xx for any mutated offer');
  const held = await streamsHeld();
  t.ok(held <= heldBefore + 1, `the node holds at most the one stream aimed at more than before (reverie_media_streams ${heldBefore} → ${held})`);

  t.comment(`seed ${SEED}: ${sent} requests; statuses ${JSON.stringify(Object.fromEntries([...statuses].sort(([a], [b]) => a - b)))}`);
  t.ok(sent >= ops.length * CASES * 0.95, `${sent} requests answered`);
  t.same(failures.slice(0, 30), [], `${failures.length} bad answers`);

  // Still healthy, still serving.
  t.equal((await fetch(`${base}/healthz`)).status, 200, 'healthy afterwards');
  t.equal((await fetch(`${base}/v1/streams`, { headers: authed })).status, 200, 'real requests still work');
  t.equal((await fetch(`${base}/music/v1/usage`, { headers: authed })).status, 200, 'on both areas');
  const again = await fetch(`${base}/v1/streams`, { method: 'POST', headers: authed, body: JSON.stringify({ params: { prompt: 'after' } }) });
  t.ok(again.status === 201 || again.status === 503, `a create still answers (${again.status})`);
});
