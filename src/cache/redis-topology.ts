// Which Redis the gateway uses and how each connection to it is opened: one server (REDIS_URL), a
// master followed through Sentinel (REDIS_SENTINELS + REDIS_SENTINEL_NAME), or a cluster
// (REDIS_CLUSTER_NODES). docs/configuration.md says how to set each;
// docs/decisions/0228-iorediss-own-sentinel-and-cluster-clients.md why ioredis's own Sentinel and
// Cluster clients are used as they are.
import { type Callback, Cluster, Redis, type RedisOptions } from './ioredis.js'

export interface HostPort {
  host: string
  port: number
}

/** What REDIS_URL gives beside REDIS_SENTINELS or REDIS_CLUSTER_NODES (a cluster has database 0 only). */
export interface RedisCredentials {
  username?: string
  password?: string
  db?: number
  /** rediss:// */
  tls?: boolean
}

export type RedisTarget =
  | { topology: 'server'; url: string }
  | { topology: 'sentinel'; sentinels: readonly HostPort[]; name: string; credentials: RedisCredentials }
  | { topology: 'cluster'; nodes: readonly HostPort[]; credentials: RedisCredentials }

/** A connection of the gateway to Redis, whatever the topology: a client, or ioredis's cluster client. */
export type RedisClient = Redis | Cluster

/** What each connection sets; `retryStrategy` and `enableOfflineQueue` apply to the whole client. */
export type ConnectionOptions = Pick<
  RedisOptions,
  | 'protocol'
  | 'connectTimeout'
  | 'retryStrategy'
  | 'enableOfflineQueue'
  | 'maxRetriesPerRequest'
  | 'commandTimeout'
  | 'lazyConnect'
  | 'enableReadyCheck'
>

/** The variables that name a target, for messages: the one an operator has to look at. */
export function variableOf(target: RedisTarget): string {
  if (target.topology === 'sentinel') return 'REDIS_SENTINELS'
  if (target.topology === 'cluster') return 'REDIS_CLUSTER_NODES'
  return 'REDIS_URL'
}

/**
 * Where a target points, never with its user or password: `redis://host:port/db` for one server
 * (`host:port` only when `short`), the sentinels and master set, or the seed nodes.
 */
export function describeRedisTarget(target: RedisTarget, { short = false } = {}): string {
  const list = (nodes: readonly HostPort[]) => nodes.map((node) => `${node.host}:${node.port}`).join(',')
  if (target.topology === 'sentinel') return `master ${target.name} via sentinels ${list(target.sentinels)}`
  if (target.topology === 'cluster') return `cluster seeds ${list(target.nodes)}`
  const parsed = new URL(target.url)
  if (short) return `${parsed.hostname || 'localhost'}:${parsed.port || '6379'}`
  const database = parsed.pathname.length > 1 ? parsed.pathname.slice(1) : '0'
  return `${parsed.protocol}//${parsed.hostname || 'localhost'}:${parsed.port || '6379'}/${database}`
}

/** The credentials as ioredis takes them. */
function optionsOf(credentials: RedisCredentials): Pick<RedisOptions, 'username' | 'password' | 'db' | 'tls'> {
  const { tls, ...rest } = credentials
  return { ...rest, ...(tls === true ? { tls: {} } : {}) }
}

/** The database a target selects (0 for a cluster). */
export function databaseOf(target: RedisTarget): number {
  if (target.topology === 'server') {
    const path = new URL(target.url).pathname
    return path.length > 1 ? Number(path.slice(1)) : 0
  }
  return target.credentials.db ?? 0
}

/**
 * A demoted master answers writes with READONLY until the client reconnects: reconnect at once
 * (ioredis then asks Sentinel for the new master) rather than fail every write until the socket
 * breaks.
 */
const reconnectOnReadOnly = (err: Error) => err.message.startsWith('READONLY')

/**
 * How long each command to a sentinel may take (asking for the master takes two) before the next
 * sentinel is asked: one that took the connection but hangs (a stopped process, a half-open
 * socket) would hold the reconnection for good.
 */
const SENTINEL_ANSWER_MS = 1_000

/** ioredis's error for a connection closed under a command or a connect. */
const CONNECTION_CLOSED = 'Connection is closed.'

/**
 * ioredis 6.0.0 gives a Sentinel client up for good (status `end`, no retry) when its failover
 * detector hears `+switch-master` while the client, between two connections, waits for a sentinel
 * to name the master: the detector's disconnect fails that connect with "Connection is closed.",
 * an error ioredis drops when the client is closed on purpose. Such a client is connected again.
 */
function reconnectAfterLostConnect(redis: Redis): void {
  let lost = false
  redis.on('error', (err: Error) => {
    if (redis.status === 'connecting' && err.message === CONNECTION_CLOSED) lost = true
  })
  redis.on('end', () => {
    // A disconnect() between the error and this event (ioredis's own flag, not reset once ended).
    const closedOnPurpose = (redis as unknown as { manuallyClosing: boolean }).manuallyClosing
    if (lost && !closedOnPurpose) redis.connect().catch(() => {})
    lost = false
  })
}

/**
 * ioredis's cluster client asks for the slots again a second after each refresh ends, and a
 * refresh under way when the client is closed ends after it: the timer it then sets asks again,
 * fails and sets the next, for ever (the client may stay `close`, never `end`), and the process
 * never ends. A client closed on purpose asks no more, so the chain stops at its next turn.
 */
class EndingCluster extends Cluster {
  private closedOnPurpose = false

  override connect(): Promise<void> {
    this.closedOnPurpose = false
    return super.connect()
  }

  override disconnect(reconnect = false): void {
    this.closedOnPurpose = !reconnect
    super.disconnect(reconnect)
  }

  override quit(callback?: Callback<'OK'>): Promise<'OK'> {
    this.closedOnPurpose = true
    return super.quit(callback)
  }

  override refreshSlotsCache(callback?: Callback<void>): void {
    if (this.closedOnPurpose) return
    super.refreshSlotsCache(callback)
  }
}

/** Opens one connection (or one cluster client) to `target` with `options`. */
export function openRedis(target: RedisTarget, options: ConnectionOptions): RedisClient {
  if (target.topology === 'server') return new Redis(target.url, { ...options, reconnectOnError: reconnectOnReadOnly })
  if (target.topology === 'sentinel') {
    const credentials = optionsOf(target.credentials)
    const redis = new Redis({
      ...options,
      ...credentials,
      sentinels: target.sentinels.map((node) => ({ ...node })),
      name: target.name,
      // Bitnami's chart (and most Sentinel deployments) protect the sentinels with the password of
      // the data nodes; a sentinel without one takes any. Not the user: an ACL user of the data
      // nodes is seldom one of the sentinels'
      // (docs/decisions/0229-the-sentinels-get-the-servers-password-not-their.md).
      ...(credentials.password === undefined ? {} : { sentinelPassword: credentials.password }),
      // Sentinel's own +switch-master message: the client moves to the new master as soon as it
      // is elected, not when its socket to the old one breaks.
      failoverDetector: true,
      sentinelRetryStrategy: (attempt: number) => Math.min(attempt * 100, 1_000),
      sentinelCommandTimeout: SENTINEL_ANSWER_MS,
      reconnectOnError: reconnectOnReadOnly,
    })
    // A client meant to stop at its first failure (a retry strategy that gives up) stays ended.
    if (typeof redis.options.retryStrategy?.(1) === 'number') reconnectAfterLostConnect(redis)
    return redis
  }
  const { retryStrategy, enableOfflineQueue, lazyConnect, enableReadyCheck, ...perNode } = options
  const { db: _db, ...credentials } = optionsOf(target.credentials)
  return new EndingCluster(
    target.nodes.map((node) => ({ ...node })),
    {
      ...(enableOfflineQueue === undefined ? {} : { enableOfflineQueue }),
      ...(lazyConnect === undefined ? {} : { lazyConnect }),
      ...(enableReadyCheck === undefined ? {} : { enableReadyCheck }),
      ...(retryStrategy === undefined ? {} : { clusterRetryStrategy: (attempt: number) => retryStrategy?.(attempt) }),
      // A master that died is replaced within a few seconds: ask the cluster for its slots again
      // every second. A command that meets a closed connection or a cluster down fails at once, as
      // on one server without an offline queue: ioredis would resend it after a pause, up to 16
      // times, while a request or a lease call waits
      // (docs/decisions/0234-a-cluster-client-fails-fast-on-a-lost-node.md).
      slotsRefreshInterval: 1_000,
      slotsRefreshTimeout: 1_000,
      retryDelayOnFailover: 0,
      retryDelayOnClusterDown: 0,
      retryDelayOnTryAgain: 50,
      redisOptions: { ...perNode, ...credentials },
    },
  )
}
