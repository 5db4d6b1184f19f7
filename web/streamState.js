// The stream status in words for people (the playground): the runner state of
// GET /v1/streams/{id}/status plus what caused it. DEGRADED_INFERENCE stays on for 60 s after any
// pipeline restart — and a processor or model change *is* a restart (a background reload) — so a
// reload that went well reads as "Live, applying a change", not as a fault.

/** Seconds after a params change during which a restart counts as that change's reload. */
const RELOAD_WINDOW_S = 60;

/**
 * @param {object|null} data  the status response's `data`
 * @param {number} nowMs      Date.now()
 * @returns {{ word: string, tone: 'idle'|'ok'|'busy'|'warn'|'error', detail: string }}
 */
export function describeState(data, nowMs) {
  if (!data) return { word: 'Unknown', tone: 'idle', detail: 'No status yet.' };
  const inf = data.inference_status ?? {};
  // Times are ms since the epoch, 0 for never; measured against the server's clock when it says.
  const now = data.last_state_update_time ?? nowMs;
  const sinceS = (t) => (typeof t === 'number' && t > 0 ? (now - t) / 1000 : Infinity);
  switch (data.state) {
    case 'OFFLINE':
      return { word: 'Waiting for video', tone: 'idle', detail: 'Nothing is being published. Start your camera, or point OBS at the WHIP URL.' };
    case 'LOADING':
      return { word: 'Starting', tone: 'busy', detail: 'Video is arriving; the pipeline is loading its first frame.' };
    case 'ONLINE':
      return { word: 'Live', tone: 'ok', detail: 'Input and output flow at healthy rates.' };
    case 'DEGRADED_INPUT':
      return { word: 'Weak input', tone: 'warn', detail: 'The publisher sends few or no frames (under 15 fps, or nothing for 2 s). Check the camera or the network.' };
    case 'DEGRADED_INFERENCE': {
      const recentError = Boolean(inf.last_error) && sinceS(data.gateway_status?.error?.error_time) < 15;
      const reloaded = sinceS(inf.last_restart_time) < RELOAD_WINDOW_S && sinceS(inf.last_params_update_time) < RELOAD_WINDOW_S + 5;
      if (!recentError && reloaded && (inf.output_fps ?? 0) > 0) {
        return { word: 'Live, applying a change', tone: 'ok', detail: 'The pipeline was rebuilt for your last change; the status settles within a minute.' };
      }
      if (recentError) return { word: 'Recovering from an error', tone: 'error', detail: `Last error: ${inf.last_error}` };
      return { word: 'Output behind', tone: 'warn', detail: 'The pipeline produces fewer frames than arrive (the node may be busy).' };
    }
    case 'ERROR':
      return { word: 'Failed to start', tone: 'error', detail: inf.last_error ? `The pipeline did not start: ${inf.last_error}` : 'The pipeline did not produce output within 3 minutes.' };
    default:
      return { word: String(data.state ?? 'Unknown'), tone: 'idle', detail: '' };
  }
}
