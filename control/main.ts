/**
 * The CLI (`reverie`, `npm run cli --`, `npm start` = `serve`):
 *   serve [--roles api,media,worker] [--port N] [--host H] [--data-dir D] [--<any-variable> V]
 *   keys create [--plan free] [--account acc_…] [--json]
 *   doctor [--json]
 */
import { parseArgs } from 'node:util';
import { addKey, createAccountWithKey } from './ApiKeys.ts';
import { CONFIG_VARIABLES, ConfigError, loadConfig, type ConfigEnv } from './config.ts';
import { formatDoctor, runDoctor } from './Doctor.ts';
import { closeOnSignals, createLogger, startServer } from './Server.ts';
import { createStore, PLANS, type Plan } from '../store/index.ts';

const SERVE_USAGE = `usage: reverie serve [--roles api,media,worker] [--port N] [--host H] [--data-dir DIR] [--<variable> VALUE …]

Runs the service: every role on the embedded store by default, or the roles named with REDIS_URL
set (scale-out). Each environment variable of the README's configuration table has a flag, which
wins over the variable: WEBRTC_UDP_PORT_RANGE=40000-40999 → --webrtc-udp-port-range 40000-40999.

Flags:
${CONFIG_VARIABLES.map((v) => `  --${v.toLowerCase().replace(/_/g, '-')}`).join('\n')}
  -h, --help          this text

Health: GET /livez (the process answers), GET /readyz (ready and its store reachable).
SIGTERM/SIGINT drains within DRAIN_TIMEOUT seconds, then exits.`;

const USAGE = `usage: reverie <command>
  serve [--roles api,media,worker] [--port N] [--host H] [--data-dir DIR]
        [--<variable> VALUE …]
                      run the service (all roles and the embedded store by default); every
                      environment variable of the README has a flag, which wins over it:
                      WEBRTC_UDP_PORT_RANGE → --webrtc-udp-port-range 40000-40999
  keys create [--plan ${PLANS.join('|')}] [--account ID] [--json]
                      create an account (or a key for an existing one); prints the key once
  doctor [--json]     check the system dependencies and say how to install what is missing`;

function fail(message: string, code = 2): never {
  process.stderr.write(`${message}\n`);
  process.exit(code);
}

function config(overrides: Partial<ConfigEnv> = {}) {
  try {
    return loadConfig(process.env, overrides);
  } catch (err) {
    if (err instanceof ConfigError) fail(`reverie: configuration error: ${err.message}`);
    throw err;
  }
}

const [command, ...rest] = process.argv.slice(2);

switch (command) {
  case 'serve': {
    // Every configuration variable has a flag: PORT → --port, WEBRTC_UDP_PORT_RANGE → --webrtc-udp-port-range.
    const flag = (variable: string) => variable.toLowerCase().replace(/_/g, '-');
    let parsed: ReturnType<typeof parseArgs>;
    try {
      parsed = parseArgs({
        args: rest,
        options: { ...Object.fromEntries(CONFIG_VARIABLES.map((v) => [flag(v), { type: 'string' as const }])), help: { type: 'boolean', short: 'h' } },
        strict: true,
      });
    } catch (err) {
      fail(`reverie: ${(err as Error).message}\n${SERVE_USAGE}`);
    }
    if (parsed.values['help']) {
      process.stdout.write(`${SERVE_USAGE}\n`);
      break;
    }
    const overrides: Record<string, string> = {};
    for (const v of CONFIG_VARIABLES) {
      const value = parsed.values[flag(v)];
      if (typeof value === 'string') overrides[v] = value;
    }
    const cfg = config(overrides as Partial<ConfigEnv>);
    const logger = createLogger(cfg);
    const server = await startServer(cfg, { logger });
    closeOnSignals(server, logger, cfg.drainTimeoutS);
    const lines = [
      `Reverie is running (${server.store.kind} store, roles: ${cfg.roles.join(', ')})`,
      `  API          ${server.url}`,
      `  songs        ${server.url}${cfg.musicBasePath}/songs`,
      `  streams      ${server.url}/v1/streams`,
      `  API docs     ${server.url}/docs   (OpenAPI: ${server.url}/openapi.json)`,
      `  pages        songs ${server.url}/web/songs.html   live playground ${server.url}/web/playground.html`,
      `  health       ${server.url}/livez  ${server.url}/readyz   metrics: ${server.url}/metrics`,
    ];
    if (server.firstKey) lines.push('', `  Your API key (shown once, keep it): ${server.firstKey}`, `  try: curl -H "Authorization: Bearer ${server.firstKey}" ${server.url}${cfg.musicBasePath}/usage`);
    process.stdout.write(`${lines.join('\n')}\n`);
    break;
  }
  case 'keys': {
    const [sub, ...args] = rest;
    if (sub !== 'create') fail(USAGE);
    const { values } = parseArgs({ args, options: { plan: { type: 'string', default: 'free' }, account: { type: 'string' }, json: { type: 'boolean', default: false } }, strict: true });
    if (!PLANS.includes(values.plan as Plan)) fail(`reverie: --plan must be one of ${PLANS.join(', ')}`);
    const cfg = config();
    const store = await createStore({ dataDir: cfg.dataDir, ...(cfg.redisUrl ? { redisUrl: cfg.redisUrl, redisPrefix: cfg.redisPrefix } : {}) });
    try {
      let out: { key: string; account: string; plan: string };
      if (values.account) {
        const account = await store.accounts.get(values.account);
        if (!account) fail(`reverie: no account ${values.account}`);
        out = { key: await addKey(store, account.id), account: account.id, plan: account.plan };
      } else {
        const created = await createAccountWithKey(store, values.plan as Plan);
        out = { key: created.key, account: created.account.id, plan: created.account.plan };
      }
      process.stdout.write(values.json ? `${JSON.stringify({ key: out.key, account: out.account })}\n` : `account ${out.account} (plan ${out.plan})\nkey     ${out.key}\nThe key is shown once; only its SHA-256 digest is stored.\n`);
    } finally {
      await store.close();
    }
    break;
  }
  case 'doctor': {
    const { values } = parseArgs({ args: rest, options: { json: { type: 'boolean', default: false } }, strict: true });
    const cfg = config();
    const results = await runDoctor({ dataDir: cfg.dataDir, config: cfg });
    process.stdout.write(values.json ? `${JSON.stringify(results, null, 2)}\n` : `${formatDoctor(results)}\n`);
    process.exitCode = results.some((r) => !r.ok && r.need === 'required') ? 1 : 0;
    break;
  }
  case undefined:
  case 'help':
  case '--help':
    process.stdout.write(`${USAGE}\n`);
    break;
  default:
    fail(`reverie: unknown command ${command}\n${USAGE}`);
}
