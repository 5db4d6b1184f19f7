/**
 * /openapi.json's security per operation matches what the server enforces: every operation is
 * sent without credentials to the real server (embedded default, every role), and one declared
 * keyless (`security: []`) must not answer 401 while one that declares a credential must.
 * Ids are well formed (so the request routes) but name nothing: a 404 for a missing record is
 * still "not 401".
 */
import t from 'tap';
import { startLiveServer } from '../helpers/liveServer.ts';
import { send } from '../helpers/net.ts';

type Operation = { security?: Record<string, string[]>[] };
type OpenApi = { security?: Record<string, string[]>[]; paths: Record<string, Record<string, Operation>> };

/** A well-formed value for each path parameter name the API uses. */
const PARAMS: Record<string, string> = {
  id: 'str_AAAAAAAAAAAAAAAAAAAAAA',
  playbackId: 'aaaaaaaaaaaaaaaaaaaaaaaa',
  streamId: 'str_AAAAAAAAAAAAAAAAAAAAAA',
  sessionId: '0123456789abcdef0123456789abcdef',
  clipId: 'clp_AAAAAAAAAAAAAAAAAAAAAA',
  recId: 'rec_AAAAAAAAAAAAAAAAAAAAAA',
  n: '1',
  stem: 'drums',
};

/** Content type and body for a method that carries one: JSON in the REST areas, SDP for WHIP/WHEP. */
function bodyFor(method: string, path: string): { headers: Record<string, string>; body?: string } {
  if (!['POST', 'PUT', 'PATCH'].includes(method)) return { headers: {} };
  if (path.startsWith('/live/sessions/')) return { headers: { 'content-type': 'application/trickle-ice-sdpfrag' }, body: 'a=end-of-candidates\r\n' };
  if (path.startsWith('/live/')) return { headers: { 'content-type': 'application/sdp' }, body: 'v=0\r\n' };
  return { headers: { 'content-type': 'application/json' }, body: '{}' };
}

t.test('every operation in /openapi.json: declared keyless ⇔ not answered 401 without credentials', { timeout: 120_000 }, async (t) => {
  const { server } = await startLiveServer(t, { env: { WEBRTC_INTERFACES: '127.0.0.1' } });
  const doc = (await (await fetch(`${server.url}/openapi.json`)).json()) as OpenApi;
  // The music base path is part of each path already (one server entry, no path prefix).
  const mismatches: string[] = [];
  let operations = 0;
  let keyless = 0;
  for (const [template, ops] of Object.entries(doc.paths)) {
    for (const [lower, op] of Object.entries(ops)) {
      const method = lower.toUpperCase();
      const security = op.security ?? doc.security ?? [];
      // OpenAPI 3.1 §4.8.30: an empty list, or an empty requirement among the alternatives, means no credential.
      const declaredKeyless = security.length === 0 || security.some((r) => Object.keys(r).length === 0);
      const path = template.replace(/\{(\w+)\}/g, (_m, name: string) => PARAMS[name] ?? `unknown-param-${name}`);
      const { headers, body } = bodyFor(method, path);
      // The control socket answers only WebSocket upgrades (a plain GET is a 400 whatever the key).
      if (/\/control$/.test(template) && method === 'GET') Object.assign(headers, { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' });
      const res = await send(server.url, { method, path, headers, ...(body !== undefined ? { body } : {}) });
      operations++;
      if (declaredKeyless) keyless++;
      if (declaredKeyless === (res.status === 401)) {
        mismatches.push(`${method} ${template}: declared ${declaredKeyless ? 'keyless' : JSON.stringify(security)}, answered ${res.status}`);
      }
    }
  }
  t.ok(operations >= 50, `${operations} operations checked`);
  t.ok(keyless >= 10 && operations - keyless >= 30, `${keyless} keyless, ${operations - keyless} with a credential`);
  t.same(mismatches, [], 'no operation declares other than what is enforced');
});
