/**
 * A params change is planned once (native/params ParamsChange.ts): for one PATCH of a live
 * stream's prompt, the params are merged, checked and planned once — by the API — and the node, the
 * frame pipeline and the engine's worker thread apply the change as it is. Counted with the params
 * module's own work counters (ParamsWork.ts): this thread's (the API, the node and the pipeline's
 * host run here) and the engine worker's (reported with its status), in process and with the api
 * reaching the node over Redis, as in scale-out.
 */
import { wrtcPublish } from '../media/wrtcPeers.ts';
import t from 'tap';
import { paramsWork } from '../../native/params/index.ts';
import { startRedis } from '../helpers/redis.ts';
import { startRolesServer } from '../helpers/rolesServer.ts';
import { until } from '../helpers/until.ts';

const BASE = { model_id: 'Lykon/dreamshaper-8', width: 384, height: 384, acceleration: 'none', use_safety_checker: false, t_index_list: [20] };

type Work = { merges: number; checks: number; plans: number };
const delta = (a: Work, b: Work): Work => ({ merges: b.merges - a.merges, checks: b.checks - a.checks, plans: b.plans - a.plans });

for (const via of ['in process', 'over Redis'] as const) {
  t.test(`${via}: one PATCH of a live stream is merged, checked and planned once, by the API`, { timeout: 300_000 }, async (t) => {
    const redis = via === 'over Redis' ? await startRedis(t) : null;
    const { api, roles } = await startRolesServer(t, redis ? { redisUrl: redis.url } : {});
    const created = await api('POST', '/v1/streams', { params: BASE });
    if (created.status !== 201) throw new Error(`create → ${created.status} ${JSON.stringify(created.body)}`);
    const id = String(created.body['id']);
    t.equal((await wrtcPublish(t, String(created.body['whip_url']), [200, 120, 60], String(created.body['stream_key']))).status, 201, 'WHIP publish accepted');
    type Engine = { framesIn: number; paramsWork?: Work };
    const engine = () => roles.node?.getStream(id)?.status().pipeline as Engine | null | undefined;
    // The engine runs in its worker and has taken frames (its status, with its counters, comes back with each).
    const running = await until('the engine running frames', engine, (e) => (e?.framesIn ?? 0) >= 5 && e?.paramsWork !== undefined, 180_000, 100);

    const here0 = { ...paramsWork };
    const worker0 = running?.paramsWork as Work;
    t.comment(`engine worker's counts before the PATCH: ${JSON.stringify(worker0)}`);
    const res = await api('PATCH', `/v1/streams/${id}`, { params: { prompt: 'a heron at dusk' } });
    const here = delta(here0, { ...paramsWork });
    t.equal(res.status, 200, 'PATCH → 200');
    t.equal(res.headers.get('x-params-update'), 'hot', 'a hot change');
    t.equal(res.headers.get('x-params-update-by'), 'node', "answered with the plan the stream's engine ran");
    t.same(here, { merges: 1, checks: 1, plans: 1 }, `this thread (API, node, pipeline host) merged, checked and planned once: ${JSON.stringify(here)}`);

    // The worker applies it with its next frame; its counters come back with that frame's status.
    const frames = (engine()?.framesIn ?? 0) + 5;
    const after = await until('five frames after the change', engine, (e) => (e?.framesIn ?? 0) >= frames, 60_000, 50);
    t.same(delta(worker0, after?.paramsWork as Work), { merges: 0, checks: 0, plans: 0 }, 'the engine worker merged, checked and planned nothing for it');
    t.equal(roles.node?.getStream(id)?.params.prompt, 'a heron at dusk', 'the node holds the change');
  });
}
