/**
 * Config is validated once, frozen, and a bad value stops start-up naming the variable.
 * The README's table lists every variable.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import t from 'tap';
import { CONFIG_VARIABLES, ConfigError, loadConfig, VIEWERS_PER_CORE } from '../../control/config.ts';

t.test('defaults match the README and the config is frozen', async (t) => {
  const c = loadConfig({});
  t.equal(c.port, 8080);
  t.equal(c.host, '127.0.0.1');
  t.equal(c.publicUrl, 'http://127.0.0.1:8080');
  t.equal(c.musicBasePath, '/music/v1');
  t.same(c.roles, ['api', 'media', 'worker']);
  t.equal(c.redisUrl, null);
  t.ok(Object.isFrozen(c));
  t.throws(() => {
    (c as { port: number }).port = 1;
  });
});

t.test('invalid values name the variable', async (t) => {
  for (const [env, variable] of [
    [{ PORT: 'eighty' }, 'PORT'],
    [{ PORT: '70000' }, 'PORT'],
    [{ REDIS_URL: 'http://nope' }, 'REDIS_URL'],
    [{ MUSIC_BASE_PATH: 'music/v1' }, 'MUSIC_BASE_PATH'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ ROLES: 'api,gpu' }, 'ROLES'],
    [{ PUBLIC_URL: 'ftp://x' }, 'PUBLIC_URL'],
    // One port: werift refuses it, and every WHIP offer failed with a 500.
    [{ WEBRTC_UDP_PORT_RANGE: '41000-41000' }, 'WEBRTC_UDP_PORT_RANGE'],
    [{ WEBRTC_UDP_PORT_RANGE: '41001-41000' }, 'WEBRTC_UDP_PORT_RANGE'],
  ] as const) {
    let caught: unknown = null;
    try {
      loadConfig(env);
    } catch (err) {
      caught = err;
    }
    t.ok(caught instanceof ConfigError, `${variable}: a ConfigError`);
    t.equal((caught as ConfigError).variable, variable, `${variable} is named`);
    t.match((caught as ConfigError).message, variable);
  }
});

t.test('WEBRTC_UDP_BUFFER_BYTES: 4 MiB by default, 0 for the kernel default, nonsense named', async (t) => {
  t.equal(loadConfig({}).webrtc.udpRecvBufferBytes, 4 * 1024 * 1024);
  t.equal(loadConfig({ WEBRTC_UDP_BUFFER_BYTES: '0' }).webrtc.udpRecvBufferBytes, 0);
  t.equal(loadConfig({ WEBRTC_UDP_BUFFER_BYTES: '8388608' }).webrtc.udpRecvBufferBytes, 8 * 1024 * 1024);
  for (const bad of ['1000', '-1', 'lots', '1e12']) {
    t.throws(() => loadConfig({ WEBRTC_UDP_BUFFER_BYTES: bad }), { name: 'ConfigError', variable: 'WEBRTC_UDP_BUFFER_BYTES' }, `${bad} is refused, naming the variable`);
  }
});

t.test('TURN_VIEWER_CREDENTIAL_TTL: viewers get 300 s credentials by default, publishers TURN_CREDENTIAL_TTL; nonsense named', async (t) => {
  const turn = { TURN_URLS: 'turn:turn.example.com:3478', TURN_SECRET: 'a-long-enough-turn-secret' };
  t.match(loadConfig(turn).webrtc.turn, { ttlS: 86_400, viewerTtlS: 300 });
  t.match(loadConfig({ ...turn, TURN_VIEWER_CREDENTIAL_TTL: '600' }).webrtc.turn, { viewerTtlS: 600 });
  t.match(loadConfig({ ...turn }, { TURN_VIEWER_CREDENTIAL_TTL: 120 }).webrtc.turn, { viewerTtlS: 120 }, 'the serve flag sets it too');
  for (const bad of ['10', '0', '100000', 'soon']) {
    t.throws(() => loadConfig({ ...turn, TURN_VIEWER_CREDENTIAL_TTL: bad }), { name: 'ConfigError', variable: 'TURN_VIEWER_CREDENTIAL_TTL' }, `${bad} is refused, naming the variable`);
  }
});

t.test('WHEP_WAITING_*: the media defaults unless set, 0 slates allowed, nonsense named', async (t) => {
  t.match(loadConfig({}).media, { maxWaitingViewersPerStream: 20, maxWaitingStreamsPerAccount: 10, maxWaitingSlates: 8 });
  const c = loadConfig({ WHEP_WAITING_VIEWERS_PER_STREAM: '5', WHEP_WAITING_STREAMS_PER_ACCOUNT: '2', WHEP_WAITING_SLATES: '0' });
  t.match(c.media, { maxWaitingViewersPerStream: 5, maxWaitingStreamsPerAccount: 2, maxWaitingSlates: 0 });
  for (const [variable, bad] of [['WHEP_WAITING_VIEWERS_PER_STREAM', '0'], ['WHEP_WAITING_STREAMS_PER_ACCOUNT', 'many'], ['WHEP_WAITING_SLATES', '-1']] as const) {
    t.throws(() => loadConfig({ [variable]: bad }), { name: 'ConfigError', variable }, `${variable}=${bad} is refused, naming the variable`);
  }
});

t.test('WHEP viewer limits: per node and per stream from the cores unless set, per-client limits the media defaults unless set, nonsense named', async (t) => {
  const cores = availableParallelism();
  t.match(loadConfig({}).media, {
    maxViewersPerNode: VIEWERS_PER_CORE * cores,
    maxViewersPerStream: VIEWERS_PER_CORE * cores,
    maxPendingViewersPerStream: 50,
    maxPendingViewersPerAddress: 8,
    whepPerAddressPerMinute: 60,
    whepPerPlaybackPerMinute: 600,
  });
  t.ok(VIEWERS_PER_CORE * 2 >= 1000, 'a 2-core node carries 1,000 viewers of one stream by default');
  t.match(loadConfig({ WHEP_VIEWERS_PER_NODE: '40' }).media, { maxViewersPerNode: 40, maxViewersPerStream: 40 }, 'one stream may take the whole node');
  const c = loadConfig({ WHEP_VIEWERS_PER_NODE: '5000', WHEP_VIEWERS_PER_STREAM: '3', WHEP_PENDING_VIEWERS_PER_STREAM: '7', WHEP_PENDING_VIEWERS_PER_ADDRESS: '200', WHEP_PER_ADDRESS_PER_MINUTE: '600', WHEP_PER_PLAYBACK_PER_MINUTE: '6000' });
  t.match(c.media, { maxViewersPerNode: 5000, maxViewersPerStream: 3, maxPendingViewersPerStream: 7, maxPendingViewersPerAddress: 200, whepPerAddressPerMinute: 600, whepPerPlaybackPerMinute: 6000 });
  for (const [variable, bad] of [['WHEP_VIEWERS_PER_NODE', '0'], ['WHEP_VIEWERS_PER_STREAM', 'lots'], ['WHEP_PENDING_VIEWERS_PER_STREAM', '-1'], ['WHEP_PENDING_VIEWERS_PER_ADDRESS', '1.5'], ['WHEP_PER_ADDRESS_PER_MINUTE', '0'], ['WHEP_PER_PLAYBACK_PER_MINUTE', 'x']] as const) {
    t.throws(() => loadConfig({ [variable]: bad }), { name: 'ConfigError', variable }, `${variable}=${bad} is refused, naming the variable`);
  }
});

t.test('LL-HLS PART-HOLD-BACK: 3 parts by default, set for a cache, fewer than 2 parts named', async (t) => {
  t.equal(loadConfig({}).media.hlsPartHoldBackMs, null, 'unset: the packager uses 3 × its part target');
  t.equal(loadConfig({ HLS_PART_HOLD_BACK_MS: '1100' }).media.hlsPartHoldBackMs, 1100);
  for (const bad of ['399', '1.5', 'long']) {
    t.throws(() => loadConfig({ HLS_PART_HOLD_BACK_MS: bad }), { name: 'ConfigError', variable: 'HLS_PART_HOLD_BACK_MS' }, `HLS_PART_HOLD_BACK_MS=${bad} is refused`);
  }
  t.equal(loadConfig({}).media.hlsPartTargetMs, 200, 'parts of 200 ms by default');
  t.equal(loadConfig({ HLS_PART_TARGET_MS: '100', HLS_PART_HOLD_BACK_MS: '250' }).media.hlsPartHoldBackMs, 250, '100 ms parts take a hold-back from 2 parts (200 ms)');
  t.throws(() => loadConfig({ HLS_PART_TARGET_MS: '100', HLS_PART_HOLD_BACK_MS: '199' }), { name: 'ConfigError', variable: 'HLS_PART_HOLD_BACK_MS' }, 'below 200 ms even with 100 ms parts');
  t.throws(() => loadConfig({ HLS_PART_TARGET_MS: '300', HLS_PART_HOLD_BACK_MS: '500' }), { name: 'ConfigError', variable: 'HLS_PART_HOLD_BACK_MS' }, 'fewer than 2 parts of the part target set: refused, naming the hold-back');
  for (const bad of ['99', '1001', '150.5']) {
    t.throws(() => loadConfig({ HLS_PART_TARGET_MS: bad }), { name: 'ConfigError', variable: 'HLS_PART_TARGET_MS' }, `HLS_PART_TARGET_MS=${bad} is refused`);
  }
});

t.test('RENDITIONS: a half rendition by default, a list, none; nonsense refused naming the variable', async (t) => {
  t.same(loadConfig({}).media.renditions, [{ name: 'half', scale: 0.5, bitrateKbps: 300 }], 'half size at 300 kb/s by default');
  t.same(
    loadConfig({ RENDITIONS: 'sd=0.5@600, low=.25@150' }).media.renditions,
    [
      { name: 'sd', scale: 0.5, bitrateKbps: 600 },
      { name: 'low', scale: 0.25, bitrateKbps: 150 },
    ],
    'a list, in order',
  );
  t.same(loadConfig({ RENDITIONS: 'none' }).media.renditions, [], 'none: the full encode only');
  for (const bad of ['half', 'half=1@300', 'half=0.05@300', 'half=0.5@20', 'a=0.5@300,a=0.4@200', 'master=0.5@300', 'Half=0.5@300', '']) {
    t.throws(() => loadConfig({ RENDITIONS: bad }), { name: 'ConfigError', variable: 'RENDITIONS' }, `RENDITIONS=${JSON.stringify(bad)} is refused`);
  }
});

t.test('publisher NACK settings: defaults, overrides, nonsense named', async (t) => {
  t.match(loadConfig({}).media, { jitterMaxLatencyMs: 500, nackMaxRetries: 5, nackMaxBitrateShare: 0.25 });
  const c = loadConfig({ WHIP_REORDER_WAIT_MAX_MS: '800', WHIP_NACK_MAX_RETRIES: '0', WHIP_NACK_MAX_BITRATE_PCT: '10' });
  t.match(c.media, { jitterMaxLatencyMs: 800, nackMaxRetries: 0, nackMaxBitrateShare: 0.1 }, 'the percent becomes a share');
  for (const [variable, bad] of [['WHIP_REORDER_WAIT_MAX_MS', '5'], ['WHIP_NACK_MAX_RETRIES', '1.5'], ['WHIP_NACK_MAX_BITRATE_PCT', '150']] as const) {
    t.throws(() => loadConfig({ [variable]: bad }), { name: 'ConfigError', variable }, `${variable}=${bad} is refused, naming the variable`);
  }
});

t.test('DELETED_STREAM_STATUS_TTL: 3600 s unless set, 0 allowed, nonsense named', async (t) => {
  t.equal(loadConfig({}).deletedStreamStatusTtlS, 3600);
  t.equal(loadConfig({ DELETED_STREAM_STATUS_TTL: '0' }).deletedStreamStatusTtlS, 0);
  t.equal(loadConfig({}, { DELETED_STREAM_STATUS_TTL: 60 }).deletedStreamStatusTtlS, 60, 'the --deleted-stream-status-ttl flag');
  for (const bad of ['-1', 'soon', '1.5', String(31 * 86_400)]) {
    t.throws(() => loadConfig({ DELETED_STREAM_STATUS_TTL: bad }), { name: 'ConfigError', variable: 'DELETED_STREAM_STATUS_TTL' }, `${bad} is refused, naming the variable`);
  }
});

t.test('ADMISSION_*: 2000 ms hook timeout, 5 s decisions, 300 s JWKS unless set (in ms inside); nonsense named', async (t) => {
  t.same(loadConfig({}).admission, { hookTimeoutMs: 2000, decisionTtlMs: 5000, jwksTtlMs: 300_000 });
  t.same(loadConfig({ ADMISSION_HOOK_TIMEOUT_MS: '500', ADMISSION_CACHE_TTL: '0', ADMISSION_JWKS_CACHE_TTL: '1.5' }).admission, { hookTimeoutMs: 500, decisionTtlMs: 0, jwksTtlMs: 1500 });
  for (const [variable, bad] of [['ADMISSION_HOOK_TIMEOUT_MS', '50'], ['ADMISSION_HOOK_TIMEOUT_MS', '60000'], ['ADMISSION_CACHE_TTL', '-1'], ['ADMISSION_JWKS_CACHE_TTL', '0'], ['ADMISSION_JWKS_CACHE_TTL', 'soon']] as const) {
    t.throws(() => loadConfig({ [variable]: bad }), { name: 'ConfigError', variable }, `${variable}=${bad} is refused, naming the variable`);
  }
});

t.test('flags override the environment', async (t) => {
  const c = loadConfig({ PORT: '9000', ROLES: 'api' }, { PORT: 9100, ROLES: 'worker,media' });
  t.equal(c.port, 9100);
  t.same(c.roles, ['worker', 'media']);
});

t.test('the README documents every variable', async (t) => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  for (const v of CONFIG_VARIABLES) t.match(readme, `| \`${v}\` |`, `${v} is in the README table`);
});

t.test('demo models are on for the embedded default and off when MODELS_DIR names a model volume', async (t) => {
  t.equal(loadConfig({}).demoModels, true, 'no MODELS_DIR: demo models under DATA_DIR');
  t.equal(loadConfig({ MODELS_DIR: '/srv/models' }).demoModels, false, 'MODELS_DIR set: never written into it by default');
  t.equal(loadConfig({ MODELS_DIR: '/srv/models', DEMO_MODELS: 'true' }).demoModels, true, 'unless asked for');
  t.equal(loadConfig({ DEMO_MODELS: 'false' }).demoModels, false);
});

t.test('DRAIN_TIMEOUT is seconds, 25 by default, and a bad value is named', async (t) => {
  t.equal(loadConfig({}).drainTimeoutS, 25);
  t.equal(loadConfig({ DRAIN_TIMEOUT: '5' }).drainTimeoutS, 5);
  t.throws(() => loadConfig({ DRAIN_TIMEOUT: '0' }), new ConfigError('invalid DRAIN_TIMEOUT: Too small: expected number to be >=1 (got "0")', 'DRAIN_TIMEOUT'));
});

t.test('TRUSTED_PROXIES: none by default; addresses and CIDR blocks taken; a bad entry is named', async (t) => {
  t.same(loadConfig({}).trustedProxies, [], 'default: no proxy is trusted');
  t.same(loadConfig({ TRUSTED_PROXIES: ' 127.0.0.1, 10.0.0.0/8 ,2001:db8::/32,::1' }).trustedProxies, ['127.0.0.1', '10.0.0.0/8', '2001:db8::/32', '::1']);
  for (const bad of ['10.0.0.0/33', '2001:db8::/129', 'proxy.example.com', '10.0.0.0/8/1', '10.0.0/8', '10.0.0.0/', '*', ',']) {
    t.throws(() => loadConfig({ TRUSTED_PROXIES: bad }), { name: 'ConfigError', variable: 'TRUSTED_PROXIES' }, `${JSON.stringify(bad)} is refused, naming the variable`);
  }
});
