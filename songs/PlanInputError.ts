/**
 * A request the planner cannot follow although each field passed the API's own checks: the
 * combination is wrong (e.g. `sections` that last under 10 s at the song's tempo). `field` names
 * the request field so the API can answer 400 naming it.
 */
export class PlanInputError extends Error {
  readonly field: string;

  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = 'PlanInputError';
    this.field = field;
  }
}
