/**
 * How often this thread merged, checked and planned params (mergeParams, checkParams, planUpdate):
 * counts, never reset. A change is planned once where it is asked for (ParamsChange.ts); a test
 * counts these around one PATCH to show no layer below does it again.
 */
export const paramsWork = { merges: 0, checks: 0, plans: 0 };
