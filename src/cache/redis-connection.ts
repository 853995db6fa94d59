// Whether the Redis that REDIS_URL (or REDIS_SENTINELS, or REDIS_CLUSTER_NODES) names will serve
// this gateway, asked once at start (docs/operations.md): a server that refuses it (a database it
// does not have, such as `/99`, a wrong or missing password), sentinels that do not monitor
// REDIS_SENTINEL_NAME, or an address in REDIS_SENTINELS that is no sentinel, is a startup error
// naming the variable. ioredis would log the refusal and carry on, on database 0 or
// unauthenticated, or take the refusal for no answer, and /readyz would say ok. A server that does
// not answer is not an error: the gateway starts degraded, as it runs through any Redis outage.
import { Cluster, Redis, ReplyError as ReplyErrorClass } from './ioredis.js'
import {
  databaseOf,
  describeRedisTarget,
  type HostPort,
  openRedis,
  type RedisTarget,
  variableOf,
} from './redis-topology.js'
import { REDIS_CONNECTION } from './settings.js'

// ioredis declares it `any`; it is redis-errors' class of the server's error replies.
const ReplyError = ReplyErrorClass as new (...args: never[]) => Error

/** Redis answered and refused: the gateway must not start on it. The message begins with the variable to fix. */
export class RedisRefused extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'RedisRefused'
  }
}

function refusedByServer(target: RedisTarget, reason: string): RedisRefused {
  const variable = variableOf(target)
  const fix = variable === 'REDIS_URL' ? 'REDIS_URL' : `${variable} or REDIS_URL (its credentials)`
  return new RedisRefused(
    `${variable} (${describeRedisTarget(target)}) was refused by the server: ${reason}; fix ${fix} or the server`,
  )
}

type SentinelTarget = Extract<RedisTarget, { topology: 'sentinel' }>

/** What one sentinel said of the master set: its address, not monitored, not a sentinel, or a refusal. */
type SentinelAnswer =
  | { kind: 'names' }
  | { kind: 'unmonitored'; monitored: string[] }
  | { kind: 'not a sentinel'; reason: string }
  | { kind: 'refused'; reason: string }
  | { kind: 'silent' }

/** The names of the master sets a sentinel monitors (SENTINEL MASTERS: a list of field-value lists). */
function masterNames(reply: unknown): string[] {
  if (!Array.isArray(reply)) return []
  return reply.flatMap((fields: unknown) => {
    if (!Array.isArray(fields)) return []
    const at = fields.indexOf('name')
    return at >= 0 && typeof fields[at + 1] === 'string' ? [fields[at + 1] as string] : []
  })
}

/** A connection made once, at start, for one question: no retry, no queue, no ready check. */
function oneTry(timeoutMs: number) {
  return {
    lazyConnect: true,
    enableReadyCheck: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: timeoutMs,
  }
}

/** Asks one sentinel for the master set's address, as ioredis will, with its password. */
async function askSentinel(node: HostPort, target: SentinelTarget, timeoutMs: number): Promise<SentinelAnswer> {
  const password = target.credentials.password
  const sentinel = new Redis({
    ...node,
    ...(password === undefined ? {} : { password }),
    protocol: REDIS_CONNECTION.protocol,
    ...oneTry(timeoutMs),
    commandTimeout: timeoutMs,
  })
  let refusal: Error | null = null
  sentinel.on('error', (err: unknown) => {
    if (err instanceof ReplyError) refusal ??= err
  })
  try {
    await sentinel.connect()
    const address = await sentinel.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', target.name)
    if (address !== null) return { kind: 'names' }
    return { kind: 'unmonitored', monitored: masterNames(await sentinel.call('SENTINEL', 'MASTERS')) }
  } catch (err) {
    const reply = refusal ?? (err instanceof ReplyError ? err : null)
    if (reply === null) return { kind: 'silent' }
    if (/unknown command/i.test(reply.message)) return { kind: 'not a sentinel', reason: reply.message }
    return { kind: 'refused', reason: reply.message }
  } finally {
    sentinel.disconnect()
  }
}

/**
 * Asks every sentinel before ioredis does: its client takes a sentinel that answers "no such
 * master" or "unknown command" for one that did not answer, and would retry them forever. An
 * address that is no sentinel is refused whatever the others say; a name that no sentinel which
 * answered monitors is refused, unless one of them names the master.
 */
async function checkSentinels(target: SentinelTarget, timeoutMs: number): Promise<'named' | 'unreachable'> {
  const answers = await Promise.all(target.sentinels.map((node) => askSentinel(node, target, timeoutMs)))
  const list = target.sentinels.map((node) => `${node.host}:${node.port}`).join(',')
  const plain = answers.findIndex((answer) => answer.kind === 'not a sentinel')
  if (plain >= 0) {
    const { host, port } = target.sentinels[plain]!
    const reason = (answers[plain] as { reason: string }).reason.trim()
    throw new RedisRefused(
      `REDIS_SENTINELS (${list}) names ${host}:${port}, which is not a sentinel (${reason}): list the sentinels' addresses (port 26379 by default), not the Redis servers'`,
    )
  }
  if (answers.some((answer) => answer.kind === 'names')) return 'named'
  const unmonitored = answers.find((answer) => answer.kind === 'unmonitored')
  if (unmonitored !== undefined) {
    const monitored = unmonitored.monitored.length === 0 ? 'none' : unmonitored.monitored.join(', ')
    throw new RedisRefused(
      `REDIS_SENTINEL_NAME (${target.name}) is not a master set the sentinels at ${list} monitor (they monitor: ${monitored}); set it to the name of their "sentinel monitor" line`,
    )
  }
  const refused = answers.find((answer) => answer.kind === 'refused')
  if (refused !== undefined) throw refusedByServer(target, `a sentinel refused: ${refused.reason}`)
  return 'unreachable'
}

/**
 * Connects as the gateway's clients will (AUTH, SELECT), then PINGs. Resolves 'reachable', or
 * 'unreachable' when no answer came within `timeoutMs`; rejects with RedisRefused when the server
 * refused the password or the database.
 */
export async function checkRedisAtStart(target: RedisTarget, timeoutMs = 2_000): Promise<'reachable' | 'unreachable'> {
  if (target.topology === 'sentinel' && (await checkSentinels(target, timeoutMs)) === 'unreachable')
    return 'unreachable'
  const redis = openRedis(target, oneTry(timeoutMs))
  // ioredis reports a refused AUTH or SELECT here, and only "Connection is closed" to connect().
  let refusal: Error | null = null
  const keep = (err: unknown) => {
    if (err instanceof ReplyError) refusal ??= err
  }
  redis.on('error', keep)
  redis.on('node error', keep)
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('no answer')), timeoutMs * 2)
  })
  try {
    try {
      await Promise.race([
        (async () => {
          await redis.connect()
          await redis.ping()
          // ioredis sent SELECT already, but a refused one only reached the error listener.
          if (!(redis instanceof Cluster)) await redis.select(databaseOf(target))
        })(),
        late,
      ])
    } catch (err) {
      const reason = refusal ?? (err instanceof ReplyError ? err : null)
      if (reason !== null) throw refusedByServer(target, reason.message)
      return 'unreachable'
    }
    return 'reachable'
  } finally {
    clearTimeout(timer)
    redis.disconnect()
  }
}
