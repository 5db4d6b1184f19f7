/**
 * The process configuration: read once from the environment (and CLI flags, which win), validated
 * with zod, frozen. Invalid config stops start-up with a message naming the variable.
 * The README's configuration table lists the same variables; a test keeps the two in step.
 */
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';

/** The roles a process can run (design.md "One codebase, three roles"). */
export type Role = 'api' | 'media' | 'worker';
export const ROLES = ['api', 'media', 'worker'] as const satisfies readonly Role[];

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off', ''])
  .transform((v) => ['1', 'true', 'yes', 'on'].includes(v));

/** Environment variable → schema. Defaults live here and only here. */
export const ConfigEnvSchema = z.object({
  /** TCP port of the HTTP server. */
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  /** Interface to bind; `0.0.0.0` for every IPv4 interface. */
  HOST: z.string().min(1).default('127.0.0.1'),
  /** The URL clients reach us at (used in whip_url, download links…); default http://HOST:PORT. */
  PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional(),
  /** Where the embedded store, blobs and generated models live. */
  DATA_DIR: z.string().min(1).default('./data'),
  /** When set, state, queues and events go through Redis (scale-out). */
  REDIS_URL: z.url({ protocol: /^rediss?$/ }).optional(),
  /** Key prefix in Redis, so several deployments can share a server. */
  REDIS_PREFIX: z.string().min(1).default('rv:'),
  /** Base path of Area A (songs); includes the version. */
  MUSIC_BASE_PATH: z
    .string()
    .regex(/^\/[A-Za-z0-9._~\-/]*[A-Za-z0-9._~-]$/, 'must start with / and not end with /')
    .default('/music/v1'),
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
  /** Comma-separated roles this process runs; all three is the embedded default. */
  ROLES: z
    .string()
    .default('api,media,worker')
    .transform((s) => s.split(',').map((r) => r.trim()).filter(Boolean))
    .pipe(z.array(z.enum(ROLES)).min(1)),
  /** Largest request body accepted, in bytes (1 MiB). */
  BODY_LIMIT: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(1024 * 1024),
  /** Directory of ONNX models, one folder per model_id (docs/models.md). Default DATA_DIR/models. */
  MODELS_DIR: z.string().min(1).optional(),
  /**
   * Test and local-development switch: webhook and style-image fetches may reach loopback.
   * Off by default; the server logs a warning when it is on.
   */
  ALLOW_LOOPBACK_TARGETS: bool.default(false),
  /** PEM file of an extra CA trusted for webhook deliveries (with the switch above, for tests). */
  EXTRA_CA_FILE: z.string().min(1).optional(),
  /**
   * Write tiny random-weight demo models for every model_id that has no real export under
   * MODELS_DIR (the embedded default does, so the live path runs end to end without weights).
   * Status, logs and the API say plainly when a stream runs on a demo model.
   */
  DEMO_MODELS: bool.default(true),
  /** Secret for signed download links; default: generated once and kept in DATA_DIR. */
  LINK_SIGNING_SECRET: z.string().min(32).optional(),
  /** Song render worker threads in this process (0 = no renderer here → 503 when none anywhere). */
  RENDER_WORKERS: z.coerce.number().int().min(0).max(64).default(1),
});

export type ConfigEnv = z.input<typeof ConfigEnvSchema>;

export interface Config {
  port: number;
  host: string;
  publicUrl: string;
  dataDir: string;
  redisUrl: string | null;
  redisPrefix: string;
  musicBasePath: string;
  logLevel: (typeof LOG_LEVELS)[number];
  roles: readonly Role[];
  bodyLimit: number;
  modelsDir: string;
  allowLoopbackTargets: boolean;
  demoModels: boolean;
  extraCaFile: string | null;
  linkSigningSecret: string | null;
  renderWorkers: number;
}

export class ConfigError extends Error {
  constructor(
    message: string,
    readonly variable: string,
  ) {
    super(message);
    this.name = 'ConfigError';
  }
}

/**
 * Builds the frozen config from an environment map (process.env by default) and overrides
 * (CLI flags, tests). Throws ConfigError naming the first bad variable.
 */
export function loadConfig(env: Record<string, string | undefined> = process.env, overrides: Partial<ConfigEnv> = {}): Readonly<Config> {
  const input: Record<string, unknown> = {};
  for (const key of Object.keys(ConfigEnvSchema.shape)) {
    const v = env[key];
    if (v !== undefined) input[key] = v;
  }
  Object.assign(input, overrides);
  const parsed = ConfigEnvSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const variable = String(issue?.path[0] ?? 'config');
    throw new ConfigError(`invalid ${variable}: ${issue?.message ?? 'invalid value'} (got ${JSON.stringify(input[variable])})`, variable);
  }
  const e = parsed.data;
  const dataDir = isAbsolute(e.DATA_DIR) ? e.DATA_DIR : resolve(e.DATA_DIR);
  const hostForUrl = e.HOST === '0.0.0.0' || e.HOST === '::' ? '127.0.0.1' : e.HOST;
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    publicUrl: (e.PUBLIC_URL ?? `http://${hostForUrl.includes(':') ? `[${hostForUrl}]` : hostForUrl}:${e.PORT}`).replace(/\/$/, ''),
    dataDir,
    redisUrl: e.REDIS_URL ?? null,
    redisPrefix: e.REDIS_PREFIX,
    musicBasePath: e.MUSIC_BASE_PATH,
    logLevel: e.LOG_LEVEL,
    roles: Object.freeze([...new Set(e.ROLES)]),
    bodyLimit: e.BODY_LIMIT,
    modelsDir: e.MODELS_DIR ? resolve(e.MODELS_DIR) : resolve(dataDir, 'models'),
    allowLoopbackTargets: e.ALLOW_LOOPBACK_TARGETS,
    demoModels: e.DEMO_MODELS,
    extraCaFile: e.EXTRA_CA_FILE ?? null,
    linkSigningSecret: e.LINK_SIGNING_SECRET ?? null,
    renderWorkers: e.RENDER_WORKERS,
  });
}

/** Names of every variable, for the README table test. */
export const CONFIG_VARIABLES = Object.keys(ConfigEnvSchema.shape);
