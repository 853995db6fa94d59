// Configuration is read once, at boot, from the environment (docs/configuration.md), validated and frozen.
// Nothing below this module reads process.env. The readers the settings share are in config-readers.ts
// and the Redis settings in config-redis.ts; this file holds the Config and assembles it.
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { parse as parseYaml } from 'yaml'
import type { RedisTarget } from './cache/redis-topology.js'
import {
  ConfigError,
  type Env,
  parseBoolean,
  parseBoundedInteger,
  parseCount,
  parseHost,
  parseMilliseconds,
  parseOnOff,
  parsePort,
  parsePositiveInteger,
  parseUrl,
  read,
} from './config-readers.js'
import { parseRedisKeyPrefix, parseRedisTarget } from './config-redis.js'
import { parseTraceSettings, parseTraceUrlTemplate, type TraceSettings } from './config-traces.js'
import { parseUsageExport, type UsageExportTarget } from './config-usage-export.js'
import { cidrProblem } from './guardrails/ip-allowlist.js'
import type { Rate } from './limits/bucket.js'
import { parseRate } from './shared/tenant-limits.js'
import { DEFAULT_WEBHOOK_ENDPOINTS_MAX } from './management/webhook-endpoint-admission.js'
import { DEFAULT_RETRY_SCHEDULE, parseRetrySchedule, type RetrySchedule } from './webhooks/retry-schedule.js'
import { type YamlErrorLike, yamlProblem } from './yaml-errors.js'

export { ConfigError } from './config-readers.js'

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'

export interface Config {
  readonly port: number
  readonly host: string
  /** Postgres connection string; undefined means the embedded database in `dataDir`. */
  readonly databaseUrl: string | undefined
  readonly dataDir: string
  /**
   * The Redis the gateway shares with its replicas: one server (REDIS_URL), a master behind
   * Sentinel (REDIS_SENTINELS, REDIS_SENTINEL_NAME) or a cluster (REDIS_CLUSTER_NODES); undefined
   * means the in-process cache only.
   */
  readonly redis: RedisTarget | undefined
  /** Prefix of the gateway's Redis keys and invalidation channel (REDIS_KEY_PREFIX, default tgw:). */
  readonly redisKeyPrefix: string
  /** The catch-all's upstream (UPSTREAM_URL); none when unset, whatever the database. */
  readonly upstreamUrl: string | undefined
  readonly gatewayConfigPath: string
  /** The parsed route table document; its routes are validated by the proxy. */
  readonly gatewayConfig: Readonly<Record<string, unknown>>
  readonly logLevel: LogLevel
  readonly metricsPort: number
  /** Forward authorization's own port (AUTHZ_PORT: docs/forward-auth.md); null: off. */
  readonly authzPort: number | null
  /** After SIGTERM, how long /readyz says 503 before the gateway stops accepting (SHUTDOWN_DELAY_MS). */
  readonly shutdownDelayMs: number
  /** Then how long in-flight requests get to finish before their connections are cut (SHUTDOWN_TIMEOUT_MS). */
  readonly shutdownTimeoutMs: number
  /** Client connections held at most; more are refused (MAX_CONNECTIONS, default 10,000). */
  readonly maxConnections: number
  /** Each parent's rate on the management API (MANAGEMENT_RATE, default 50/1s). */
  readonly managementRate: Rate
  /**
   * 32 bytes (ENCRYPTION_KEY, base64) that encrypt the signing keys' private parts; undefined when
   * unset (docs/credentials.md says when that is allowed).
   */
  readonly encryptionKey: Buffer | undefined
  /** `iss` of access tokens and identity assertions, and `aud` of access tokens (ISSUER_URL). */
  readonly issuerUrl: string
  /** ISSUER_URL was not set: `issuerUrl` is `http://localhost:<PORT>`, and a warning says so at start. */
  readonly issuerUrlIsDefault: boolean
  /** Lifetime of an access token (ACCESS_TOKEN_TTL_SECONDS, default 900, at most 3600). */
  readonly accessTokenTtlSeconds: number
  /** A new signing key every this many days (SIGNING_KEY_ROTATION_DAYS, default 30). */
  readonly signingKeyRotationDays: number
  /**
   * Days the request log keeps (REQUEST_LOG_RETENTION_DAYS, default 7, at most 90); 0: no request
   * log at all (docs/configuration.md).
   */
  readonly requestLogRetentionDays: number
  /** The usage period (USAGE_PERIOD_SECONDS, default 3600): 60 to 86400, a divisor of a day. */
  readonly usagePeriodSeconds: number
  /** How long after its end a usage period waits for late flushes before it closes (USAGE_CLOSE_GRACE_SECONDS, 1–3600, default 120). */
  readonly usageCloseGraceSeconds: number
  /**
   * The proxies whose X-Forwarded-For is believed (TRUSTED_PROXIES, CIDRs, default none): the
   * client's address is then the right-most one of the header not among them.
   */
  readonly trustedProxies: readonly string[]
  /** Another Postgres for the request log (REQUEST_LOG_DATABASE_URL); undefined: the store's own. */
  readonly requestLogDatabaseUrl: string | undefined
  /** Webhooks to http and to any address, private ones included (WEBHOOKS_ALLOW_INSECURE, default false). */
  readonly webhooksAllowInsecure: boolean
  /**
   * Where GitHub's secret scanning public keys are fetched (SECRET_SCANNING_KEYS_URL): https, or
   * http to a loopback address (tests); default GitHub's own (docs/secret-scanning.md).
   */
  readonly secretScanningKeysUrl: string
  /** A parent's webhook endpoints at most (WEBHOOK_ENDPOINTS_MAX, default 20, at most 1000). */
  readonly webhookEndpointsMax: number
  /** Events older than this many days are deleted (EVENTS_RETENTION_DAYS, default 90). */
  readonly eventsRetentionDays: number
  /** Delays before each retry of a failed webhook delivery, in ms (WEBHOOKS_RETRY_SCHEDULE). */
  readonly webhooksRetrySchedule: RetrySchedule
  /** The web console at /console (CONSOLE, on or off, default on). */
  readonly console: boolean
  /** Where the closed usage periods are pushed, and their signing secret (USAGE_EXPORT_URL and _SECRET); null: not pushed. */
  readonly usageExport: UsageExportTarget | null
  /** Traces over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_* variables); null: off. */
  readonly traces: TraceSettings | null
  /** A trace's page, `{trace_id}` standing for its id (TRACE_URL_TEMPLATE); null: the console shows the id alone. */
  readonly traceUrlTemplate: string | null
}

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']

/** The route table's YAML at `path` (GATEWAY_CONFIG, `named` as set; relative ones resolved against `cwd`). */
function loadGatewayConfig(path: string, named: string | undefined, cwd: string): Record<string, unknown> {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error'
    if (code === 'ENOENT')
      throw new ConfigError(
        'GATEWAY_CONFIG',
        `${named === undefined ? 'is not set, and its default config/gateway.yaml' : `(${named})`} does not exist: ${path} ` +
          `(a relative path starts at the working directory, ${cwd}); name a route table that exists, by an absolute path or one from there`,
      )
    throw new ConfigError('GATEWAY_CONFIG', `cannot be read: ${code} ${path}`)
  }
  let doc: unknown
  try {
    doc = parseYaml(text)
  } catch (err) {
    throw new ConfigError('GATEWAY_CONFIG', `is not valid YAML (${path}): ${yamlProblem(err as YamlErrorLike, text)}`)
  }
  if (doc === null || doc === undefined) return {}
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new ConfigError('GATEWAY_CONFIG', `must hold a YAML mapping (${path})`)
  }
  return doc as Record<string, unknown>
}

function parseManagementRate(env: Env): Rate {
  const raw = read(env, 'MANAGEMENT_RATE') ?? '50/1s'
  try {
    const rate = parseRate(raw)
    return { requests: rate.requests, perSeconds: rate.per_seconds }
  } catch (err) {
    throw new ConfigError('MANAGEMENT_RATE', `${(err as Error).message.replace(/^--rate /, '')}, got "${raw}"`)
  }
}

function parseEncryptionKey(env: Env): Buffer | undefined {
  const raw = read(env, 'ENCRYPTION_KEY')
  if (raw === undefined) return undefined
  const key = /^[A-Za-z0-9+/]+={0,2}$/.test(raw) ? Buffer.from(raw, 'base64') : Buffer.alloc(0)
  // Never echo the value: it is a secret.
  if (key.length !== 32)
    throw new ConfigError('ENCRYPTION_KEY', 'must be 32 random bytes in base64 (openssl rand -base64 32)')
  return key
}

/** RFC 8414 §2: an issuer has no query or fragment; nor may it carry credentials. */
function parseIssuerUrl(env: Env): string | undefined {
  const raw = parseUrl(env, 'ISSUER_URL', ['http:', 'https:'])
  if (raw === undefined) return undefined
  const url = new URL(raw)
  if (url.search !== '' || url.hash !== '' || raw.includes('?') || raw.includes('#'))
    throw new ConfigError('ISSUER_URL', "must have no query (?) or fragment (#): it is the gateway's public origin")
  if (url.username !== '' || url.password !== '')
    throw new ConfigError('ISSUER_URL', 'must not carry a user or password')
  return raw.replace(/\/+$/, '')
}

/** TRUSTED_PROXIES: addresses or CIDRs, separated by commas. */
function parseTrustedProxies(env: Env): readonly string[] {
  const raw = read(env, 'TRUSTED_PROXIES')
  if (raw === undefined) return Object.freeze([])
  const entries = raw.split(',').map((entry) => entry.trim())
  for (const entry of entries) {
    const problem = entry === '' ? 'is empty' : cidrProblem(entry)
    if (problem !== null)
      throw new ConfigError(
        'TRUSTED_PROXIES',
        `has an entry that ${problem}: list addresses or CIDRs separated by commas, e.g. 10.0.0.0/8,fd00::/8`,
      )
  }
  return Object.freeze(entries)
}

function parseWebhookRetrySchedule(env: Env): RetrySchedule {
  const raw = read(env, 'WEBHOOKS_RETRY_SCHEDULE') ?? DEFAULT_RETRY_SCHEDULE
  try {
    return Object.freeze(parseRetrySchedule(raw))
  } catch (err) {
    throw new ConfigError('WEBHOOKS_RETRY_SCHEDULE', (err as Error).message)
  }
}

export function loadConfig(env: Env, cwd: string = process.cwd()): Config {
  const logLevel = (read(env, 'LOG_LEVEL') ?? 'info') as LogLevel
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`)
  }
  const gatewayConfigNamed = read(env, 'GATEWAY_CONFIG')
  const gatewayConfigPath = resolve(cwd, gatewayConfigNamed ?? 'config/gateway.yaml')
  const port = parsePort(env, 'PORT', 8080)
  const databaseUrl = parseUrl(env, 'DATABASE_URL', ['postgres:', 'postgresql:'])
  const gatewayConfig = loadGatewayConfig(gatewayConfigPath, gatewayConfigNamed, cwd)
  const issuerUrl = parseIssuerUrl(env)
  return Object.freeze({
    port,
    host: parseHost(env),
    databaseUrl,
    dataDir: resolve(cwd, read(env, 'DATA_DIR') ?? '.data'),
    redis: parseRedisTarget(env),
    redisKeyPrefix: parseRedisKeyPrefix(env),
    upstreamUrl: parseUrl(env, 'UPSTREAM_URL', ['http:', 'https:']),
    gatewayConfigPath,
    gatewayConfig: Object.freeze(gatewayConfig),
    logLevel,
    metricsPort: parsePort(env, 'METRICS_PORT', 9091),
    authzPort: parseAuthzPort(env, port),
    shutdownDelayMs: parseMilliseconds(env, 'SHUTDOWN_DELAY_MS', 0),
    shutdownTimeoutMs: parseMilliseconds(env, 'SHUTDOWN_TIMEOUT_MS', 10_000),
    maxConnections: parsePositiveInteger(env, 'MAX_CONNECTIONS', 10_000),
    managementRate: parseManagementRate(env),
    encryptionKey: parseEncryptionKey(env),
    issuerUrl: issuerUrl ?? `http://localhost:${port}`,
    issuerUrlIsDefault: issuerUrl === undefined,
    accessTokenTtlSeconds: parseBoundedInteger(env, 'ACCESS_TOKEN_TTL_SECONDS', 900, 3600),
    signingKeyRotationDays: parseBoundedInteger(env, 'SIGNING_KEY_ROTATION_DAYS', 30, 3650),
    webhooksAllowInsecure: parseBoolean(env, 'WEBHOOKS_ALLOW_INSECURE'),
    secretScanningKeysUrl: parseSecretScanningKeysUrl(env),
    webhookEndpointsMax: parseBoundedInteger(env, 'WEBHOOK_ENDPOINTS_MAX', DEFAULT_WEBHOOK_ENDPOINTS_MAX, 1000),
    eventsRetentionDays: parseBoundedInteger(env, 'EVENTS_RETENTION_DAYS', 90, 36500),
    trustedProxies: parseTrustedProxies(env),
    requestLogRetentionDays: parseCount(env, 'REQUEST_LOG_RETENTION_DAYS', 7, 90),
    usagePeriodSeconds: parseUsagePeriod(env),
    usageCloseGraceSeconds: parseBoundedInteger(env, 'USAGE_CLOSE_GRACE_SECONDS', 120, 3_600),
    requestLogDatabaseUrl: parseUrl(env, 'REQUEST_LOG_DATABASE_URL', ['postgres:', 'postgresql:']),
    webhooksRetrySchedule: parseWebhookRetrySchedule(env),
    console: parseOnOff(env, 'CONSOLE', true),
    usageExport: parseUsageExport(env),
    traces: parseTraceSettings(env),
    traceUrlTemplate: parseTraceUrlTemplate(env),
  })
}

/**
 * AUTHZ_PORT: unset, no forward authorization. Its endpoints take no key of their own, so it is
 * never PORT, nor METRICS_PORT: a port shared with either would serve decisions to every client.
 */
function parseAuthzPort(env: Env, port: number): number | null {
  if (read(env, 'AUTHZ_PORT') === undefined) return null
  const authzPort = parsePort(env, 'AUTHZ_PORT', 0)
  const metricsPort = parsePort(env, 'METRICS_PORT', 9091)
  if (authzPort !== 0 && (authzPort === port || authzPort === metricsPort))
    throw new ConfigError(
      'AUTHZ_PORT',
      `must differ from ${authzPort === port ? 'PORT' : 'METRICS_PORT'} (${authzPort}): it answers without a key, so only the proxy in front may reach it; set another port`,
    )
  return authzPort
}

/** GitHub's secret scanning public keys (docs/secret-scanning.md). */
export const GITHUB_SECRET_SCANNING_KEYS_URL = 'https://api.github.com/meta/public_keys/secret_scanning'

/** SECRET_SCANNING_KEYS_URL: https, or http to a loopback address only (a report's keys are trusted whole). */
function parseSecretScanningKeysUrl(env: Env): string {
  const raw = parseUrl(env, 'SECRET_SCANNING_KEYS_URL', ['https:', 'http:'])
  if (raw === undefined) return GITHUB_SECRET_SCANNING_KEYS_URL
  const url = new URL(raw)
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1')
  const loopback = host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
  if (url.protocol === 'http:' && !loopback)
    throw new ConfigError(
      'SECRET_SCANNING_KEYS_URL',
      'must use https:// (http:// only to a loopback address, for tests)',
    )
  return raw
}

/** USAGE_PERIOD_SECONDS: usage is counted per period, and a day holds whole periods (docs/configuration.md). */
function parseUsagePeriod(env: Env): number {
  const seconds = parseBoundedInteger(env, 'USAGE_PERIOD_SECONDS', 3600, 86_400)
  if (seconds < 60 || 86_400 % seconds !== 0)
    throw new ConfigError(
      'USAGE_PERIOD_SECONDS',
      `must be from 60 to 86400 seconds and divide a day (60, 300, 900, 3600, 86400…), got "${seconds}"`,
    )
  return seconds
}
