// Configuration is read once, at boot, from the environment (docs/configuration.md), validated and frozen.
// Nothing below this module reads process.env.
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { parse as parseYaml } from 'yaml'
import type { HostPort, RedisCredentials, RedisTarget } from './cache/redis-topology.js'
import { cidrProblem } from './guardrails/ip-allowlist.js'
import type { Rate } from './limits/bucket.js'
import { parseRate } from './limits/tenant-limits.js'
import { DEFAULT_WEBHOOK_ENDPOINTS_MAX } from './management/webhook-endpoint-admission.js'
import { DEFAULT_RETRY_SCHEDULE, parseRetrySchedule, type RetrySchedule } from './webhooks/retry-schedule.js'
import { type YamlErrorLike, yamlProblem } from './yaml-errors.js'

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
  /** The catch-all's upstream: UPSTREAM_URL, or EMBEDDED_UPSTREAM_URL (see `upstreamUrlIsDefault`). */
  readonly upstreamUrl: string | undefined
  /** True when UPSTREAM_URL is unset and the embedded database's default stands in for it. */
  readonly upstreamUrlIsDefault: boolean
  readonly gatewayConfigPath: string
  /** The parsed route table document; its routes are validated by the proxy. */
  readonly gatewayConfig: Readonly<Record<string, unknown>>
  readonly logLevel: LogLevel
  readonly metricsPort: number
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
  /**
   * The proxies whose X-Forwarded-For is believed (TRUSTED_PROXIES, CIDRs, default none): the
   * client's address is then the right-most one of the header not among them.
   */
  readonly trustedProxies: readonly string[]
  /** Another Postgres for the request log (REQUEST_LOG_DATABASE_URL); undefined: the store's own. */
  readonly requestLogDatabaseUrl: string | undefined
  /** Webhooks to http and to any address, private ones included (WEBHOOKS_ALLOW_INSECURE, default false). */
  readonly webhooksAllowInsecure: boolean
  /** A parent's webhook endpoints at most (WEBHOOK_ENDPOINTS_MAX, default 20, at most 1000). */
  readonly webhookEndpointsMax: number
  /** Events older than this many days are deleted (EVENTS_RETENTION_DAYS, default 90). */
  readonly eventsRetentionDays: number
  /** Delays before each retry of a failed webhook delivery, in ms (WEBHOOKS_RETRY_SCHEDULE). */
  readonly webhooksRetrySchedule: RetrySchedule
  /** The web console at /console (CONSOLE, on or off, default on). */
  readonly console: boolean
}

/** A configuration mistake. Its message is one line that names the variable. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(`invalid configuration: ${variable} ${problem}`)
    this.name = 'ConfigError'
  }
}

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']

type Env = Readonly<Record<string, string | undefined>>

/** An unset or blank variable counts as unset, as a shell's `VAR=` usually intends. */
function read(env: Env, name: string): string | undefined {
  const value = env[name]
  return value === undefined || value.trim() === '' ? undefined : value.trim()
}

function parsePort(env: Env, name: string, fallback: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^\d{1,5}$/.test(raw) || Number(raw) > 65535) {
    throw new ConfigError(name, `must be a port number from 0 to 65535, got "${raw}"`)
  }
  return Number(raw)
}

function parseMilliseconds(env: Env, name: string, fallback: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^\d{1,7}$/.test(raw))
    throw new ConfigError(name, `must be a whole number of milliseconds up to 9999999, got "${raw}"`)
  return Number(raw)
}

function parsePositiveInteger(env: Env, name: string, fallback: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^[1-9]\d{0,8}$/.test(raw))
    throw new ConfigError(name, `must be a whole number from 1 to 999999999, got "${raw}"`)
  return Number(raw)
}

function parseUrl(env: Env, name: string, protocols: readonly string[]): string | undefined {
  const raw = read(env, name)
  if (raw === undefined) return undefined
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ConfigError(name, 'is not a valid URL')
  }
  if (!protocols.includes(url.protocol)) {
    // Never echo the value: a connection string may carry a password.
    throw new ConfigError(name, `must use one of ${protocols.map((p) => p.replace(':', '://')).join(', ')}`)
  }
  return raw
}

/**
 * A Redis URL whose path, if any, is a database number (`/0`…`/15` on a default server): ioredis
 * would take `/abc` or `/1x` for database 0 without a word. Whether the server has that database is
 * asked at start (cache/redis-connection.ts).
 */
function parseRedisUrl(env: Env): string | undefined {
  const raw = parseUrl(env, 'REDIS_URL', ['redis:', 'rediss:'])
  if (raw === undefined) return undefined
  const path = new URL(raw).pathname
  if (path !== '' && path !== '/' && !/^\/\d{1,5}$/.test(path))
    throw new ConfigError('REDIS_URL', 'may end with a database number only (redis://host:6379/0), not another path')
  return raw
}

/** `host:port,host:port,…`: a host name, an IPv4 address or a bracketed IPv6 one, and a port. */
function parseHostPorts(env: Env, name: string, what: string): HostPort[] | undefined {
  const raw = read(env, name)
  if (raw === undefined) return undefined
  const nodes: HostPort[] = []
  for (const item of raw.split(',').map((part) => part.trim())) {
    const match = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/.exec(item)
    const port = match === null ? 0 : Number(match[2])
    if (match === null || port < 1 || port > 65535)
      throw new ConfigError(
        name,
        `must list ${what} as host:port separated by commas (redis-sentinel:26379,10.0.0.2:26379), got "${item}"`,
      )
    nodes.push({ host: match[1]!.replace(/^\[(.*)\]$/, '$1'), port })
  }
  return nodes
}

/**
 * REDIS_URL beside REDIS_SENTINELS or REDIS_CLUSTER_NODES: credentials and a database only
 * (`redis://:password@/0`, `rediss://user:password@`), since the sentinels or the cluster say where
 * the servers are. A URL parser refuses an empty host, hence the pattern.
 */
function parseRedisCredentials(env: Env, alongside: string, database: boolean): RedisCredentials {
  const raw = read(env, 'REDIS_URL')
  if (raw === undefined) return {}
  const match = /^(rediss?):\/\/(?:([^:@/]*)(?::([^@/]*))?@)?(?:\/(\d{0,5}))?$/.exec(raw)
  if (match === null)
    // Never echo the value: it may carry a password.
    throw new ConfigError(
      'REDIS_URL',
      `must give only credentials${database ? ' and a database' : ''} when ${alongside} is set (redis://:password@${database ? '/0' : ''}), not a host: ${alongside} says where the servers are; or unset it`,
    )
  const [, scheme, username, password, db] = match
  const number = db === undefined || db === '' ? 0 : Number(db)
  if (!database && number !== 0)
    throw new ConfigError(
      'REDIS_URL',
      `must not name a database when ${alongside} is set: a cluster has database 0 only`,
    )
  const decode = (part: string | undefined) =>
    part === undefined || part === '' ? undefined : decodeURIComponent(part)
  const user = decode(username)
  const secret = decode(password)
  return {
    ...(user === undefined ? {} : { username: user }),
    ...(secret === undefined ? {} : { password: secret }),
    ...(number === 0 ? {} : { db: number }),
    ...(scheme === 'rediss' ? { tls: true } : {}),
  }
}

/** Which Redis: REDIS_URL alone, REDIS_SENTINELS with REDIS_SENTINEL_NAME, or REDIS_CLUSTER_NODES. */
function parseRedisTarget(env: Env): RedisTarget | undefined {
  const sentinels = parseHostPorts(env, 'REDIS_SENTINELS', 'the sentinels')
  const name = read(env, 'REDIS_SENTINEL_NAME')
  const nodes = parseHostPorts(env, 'REDIS_CLUSTER_NODES', 'seed nodes of the cluster')
  if (sentinels !== undefined && nodes !== undefined)
    throw new ConfigError(
      'REDIS_CLUSTER_NODES',
      'cannot be set together with REDIS_SENTINELS: a deployment uses Sentinel or a cluster, unset one of them',
    )
  if (name !== undefined && sentinels === undefined)
    throw new ConfigError(
      'REDIS_SENTINEL_NAME',
      'is set but REDIS_SENTINELS is not: list the sentinels (host:port,…) or unset it',
    )
  if (sentinels !== undefined) {
    if (name === undefined)
      throw new ConfigError(
        'REDIS_SENTINEL_NAME',
        "must be set with REDIS_SENTINELS: the master set's name the sentinels monitor (mymaster on Bitnami's chart)",
      )
    if (!/^[A-Za-z0-9._-]{1,128}$/.test(name))
      throw new ConfigError('REDIS_SENTINEL_NAME', `must hold 1 to 128 of A-Z a-z 0-9 . _ -, got "${name}"`)
    return { topology: 'sentinel', sentinels, name, credentials: parseRedisCredentials(env, 'REDIS_SENTINELS', true) }
  }
  if (nodes !== undefined) {
    return { topology: 'cluster', nodes, credentials: parseRedisCredentials(env, 'REDIS_CLUSTER_NODES', false) }
  }
  const url = parseRedisUrl(env)
  return url === undefined ? undefined : { topology: 'server', url }
}

function parseRedisKeyPrefix(env: Env): string {
  const raw = read(env, 'REDIS_KEY_PREFIX')
  if (raw === undefined) return 'tgw:'
  if (!/^[A-Za-z0-9_.:-]{1,64}$/.test(raw)) {
    throw new ConfigError('REDIS_KEY_PREFIX', 'must hold 1 to 64 of A-Z a-z 0-9 _ . : -')
  }
  return raw
}

function loadGatewayConfig(path: string): Record<string, unknown> {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    throw new ConfigError('GATEWAY_CONFIG', `cannot be read: ${(err as NodeJS.ErrnoException).code ?? 'error'} ${path}`)
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

function parseBoundedInteger(env: Env, name: string, fallback: number, max: number): number {
  const value = parsePositiveInteger(env, name, fallback)
  if (value > max) throw new ConfigError(name, `must be at most ${max}, got "${value}"`)
  return value
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

/** A whole number from 0 to `max`; 0 means off. */
function parseCount(env: Env, name: string, fallback: number, max: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^\d{1,9}$/.test(raw) || Number(raw) > max)
    throw new ConfigError(name, `must be a whole number from 0 (off) to ${max}, got "${raw}"`)
  return Number(raw)
}

function parseBoolean(env: Env, name: string): boolean {
  const raw = read(env, name)
  if (raw === undefined || raw === 'false') return false
  if (raw === 'true') return true
  throw new ConfigError(name, `must be true or false, got "${raw}"`)
}

function parseWebhookRetrySchedule(env: Env): RetrySchedule {
  const raw = read(env, 'WEBHOOKS_RETRY_SCHEDULE') ?? DEFAULT_RETRY_SCHEDULE
  try {
    return Object.freeze(parseRetrySchedule(raw))
  } catch (err) {
    throw new ConfigError('WEBHOOKS_RETRY_SCHEDULE', (err as Error).message)
  }
}

function parseOnOff(env: Env, name: string, fallback: boolean): boolean {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (raw === 'on') return true
  if (raw === 'off') return false
  throw new ConfigError(name, `must be on or off, got "${raw}"`)
}

/**
 * Where an embedded gateway with nothing to proxy to sends every other path: the address of
 * `npm run echo-upstream` (scripts/echo-upstream.ts), so that a first `npm start` proxies
 * something (docs/decisions.md, The first run's upstream).
 */
export const EMBEDDED_UPSTREAM_URL = 'http://127.0.0.1:9000'

/** The embedded database's default applies only when nothing else says where to proxy. */
function upstreamOf(env: Env, databaseUrl: string | undefined, gatewayConfig: Record<string, unknown>) {
  const set = parseUrl(env, 'UPSTREAM_URL', ['http:', 'https:'])
  if (set !== undefined) return { upstreamUrl: set, upstreamUrlIsDefault: false }
  const routes = gatewayConfig.routes
  const nothingToProxyTo =
    databaseUrl === undefined &&
    (routes === undefined || routes === null || (Array.isArray(routes) && routes.length === 0))
  return nothingToProxyTo
    ? { upstreamUrl: EMBEDDED_UPSTREAM_URL, upstreamUrlIsDefault: true }
    : { upstreamUrl: undefined, upstreamUrlIsDefault: false }
}

export function loadConfig(env: Env, cwd: string = process.cwd()): Config {
  const logLevel = (read(env, 'LOG_LEVEL') ?? 'info') as LogLevel
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`)
  }
  const gatewayConfigPath = resolve(cwd, read(env, 'GATEWAY_CONFIG') ?? 'config/gateway.yaml')
  const port = parsePort(env, 'PORT', 8080)
  const databaseUrl = parseUrl(env, 'DATABASE_URL', ['postgres:', 'postgresql:'])
  const gatewayConfig = loadGatewayConfig(gatewayConfigPath)
  const issuerUrl = parseIssuerUrl(env)
  return Object.freeze({
    port,
    host: read(env, 'HOST') ?? '0.0.0.0',
    databaseUrl,
    dataDir: resolve(cwd, read(env, 'DATA_DIR') ?? '.data'),
    redis: parseRedisTarget(env),
    redisKeyPrefix: parseRedisKeyPrefix(env),
    ...upstreamOf(env, databaseUrl, gatewayConfig),
    gatewayConfigPath,
    gatewayConfig: Object.freeze(gatewayConfig),
    logLevel,
    metricsPort: parsePort(env, 'METRICS_PORT', 9091),
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
    webhookEndpointsMax: parseBoundedInteger(env, 'WEBHOOK_ENDPOINTS_MAX', DEFAULT_WEBHOOK_ENDPOINTS_MAX, 1000),
    eventsRetentionDays: parseBoundedInteger(env, 'EVENTS_RETENTION_DAYS', 90, 36500),
    trustedProxies: parseTrustedProxies(env),
    requestLogRetentionDays: parseCount(env, 'REQUEST_LOG_RETENTION_DAYS', 7, 90),
    requestLogDatabaseUrl: parseUrl(env, 'REQUEST_LOG_DATABASE_URL', ['postgres:', 'postgresql:']),
    webhooksRetrySchedule: parseWebhookRetrySchedule(env),
    console: parseOnOff(env, 'CONSOLE', true),
  })
}
