// The Redis settings (docs/configuration.md): which Redis (one server, Sentinel or a cluster) and
// the prefix of the gateway's keys. Their rules (which variables go together, what REDIS_URL may
// hold beside the sentinels or the cluster) are many and concern Redis alone, so they live apart
// from config.ts, which takes the results.
import type { HostPort, RedisCredentials, RedisTarget } from './cache/redis-topology.js'
import { ConfigError, type Env, parseUrl, read } from './config-readers.js'

/**
 * Neither form of REDIS_URL may carry a query string or a fragment: ioredis would take options from
 * the query (`?password=`, `?db=`) past every check here. Never echo the value: it may hold a password.
 */
function refuseQueryOrFragment(raw: string): void {
  if (/[?#]/.test(raw))
    throw new ConfigError(
      'REDIS_URL',
      'must not have a query string or a fragment (?…, #…): give the password as redis://:password@host:6379/0, with any ? or # in it written %3F or %23',
    )
}

/**
 * A Redis URL whose path, if any, is a database number (`/0`…`/15` on a default server): ioredis
 * would take `/abc` or `/1x` for database 0 without a word. Whether the server has that database is
 * asked at start (cache/redis-connection.ts).
 */
function parseRedisUrl(env: Env): string | undefined {
  const raw = parseUrl(env, 'REDIS_URL', ['redis:', 'rediss:'])
  if (raw === undefined) return undefined
  refuseQueryOrFragment(raw)
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
  refuseQueryOrFragment(raw)
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
export function parseRedisTarget(env: Env): RedisTarget | undefined {
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

export function parseRedisKeyPrefix(env: Env): string {
  const raw = read(env, 'REDIS_KEY_PREFIX')
  if (raw === undefined) return 'tgw:'
  if (!/^[A-Za-z0-9_.:-]{1,64}$/.test(raw)) {
    throw new ConfigError('REDIS_KEY_PREFIX', 'must hold 1 to 64 of A-Z a-z 0-9 _ . : -')
  }
  return raw
}
