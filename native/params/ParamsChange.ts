/**
 * A change of a stream's params as one value: planned once, where it is asked for (the API, for a
 * PATCH or a control-socket update; the node, for what it makes itself: a publisher's grant, an
 * audio mapping's value, a scheduled change landing), and carried unchanged to the engine. The
 * layers below apply it — hot keys from `target` on the next frame, a reload of `target` when
 * `plan.reload` is not empty — and never merge, check or plan it again.
 */
import { paramsWork } from './ParamsWork.ts';
import { assertParams, mergeParams, type ParamsPatch, type StreamParams } from './StreamParams.ts';
import { planUpdate, type UpdatePlan } from './UpdatePlan.ts';

export interface ParamsChange {
  /** The full params after the change, checked where it was planned. */
  target: StreamParams;
  /** What changes: `hot` keys apply from the next frame, `reload` keys rebuild the pipeline. */
  plan: UpdatePlan;
}

/** Merges `patch` over `before`, checks the result (throws InvalidParamsError) and plans the change: the one place a change is made. */
export function planChange(before: StreamParams, patch: ParamsPatch): ParamsChange {
  const target = assertParams(mergeParams(before, patch));
  return { target, plan: planUpdate(before, target) };
}

/** The hot part of a change (what a running pipeline applies; the reload part goes to the one being built). */
export function hotPart(change: ParamsChange): ParamsChange {
  const { hot } = change.plan;
  return { target: change.target, plan: { mode: hot.length > 0 ? 'hot' : 'none', hot, reload: [] } };
}

export { paramsWork };
