// Health (docs/operations.md): /healthz says the process is alive and asks nothing of the stores,
// so a Postgres outage never gets the pods restarted; /readyz says whether this replica should get
// traffic: it has reached Postgres since it started, and shutdown has not begun. A later outage of
// Postgres or Redis shows in its body and in the metrics but does not fail it: every replica sees
// the same outage, and taking them all out of the Service at once would turn a store outage, which
// the caches bridge for known keys, into a total one.
import type { FastifyPluginAsync } from 'fastify'
import { Type } from 'typebox'
import type { TenancyCache } from '../cache/tiered.js'
import { PROBLEM_CONTENT_TYPE, problem } from '../errors.js'
import { withDeadline, type Sql } from '../store/db.js'
import { hasReachedPostgres } from '../store/first-contact.js'

/** Long enough for a loaded but healthy store, short enough for a kubelet's 1 s probe timeout. */
export const READINESS_TIMEOUT_MS = 800

export type CheckResult = 'ok' | 'down' | 'off'

export interface Readiness {
  /** Set when shutdown begins: the replica answers 503 so that load balancers take it out. */
  draining: boolean
}

declare module 'fastify' {
  interface FastifyInstance {
    readiness: Readiness
  }
}

export interface HealthOptions {
  /** The pool whose first contact since the start makes the replica ready. */
  sql: Sql
  /** Where `select 1` is asked: the lookups' own connections, which no management call holds. */
  probeSql: Sql
  cache: TenancyCache
  readiness: Readiness
}

async function postgresAnswers(sql: Sql, timeoutMs: number): Promise<CheckResult> {
  return withDeadline(sql`select 1`, timeoutMs).then(
    () => 'ok' as const,
    () => 'down' as const,
  )
}

const Checks = Type.Object({
  postgres: Type.Union([Type.Literal('ok'), Type.Literal('down')]),
  redis: Type.Union([Type.Literal('ok'), Type.Literal('down'), Type.Literal('off')], {
    description:
      'off: no Redis is configured (REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES), in-process cache only',
  }),
})

const RedisState = Type.Object(
  {
    topology: Type.Union([Type.Literal('server'), Type.Literal('sentinel'), Type.Literal('cluster')]),
    masters: Type.Array(Type.String(), {
      description:
        "host:port of each master the gateway's commands go to now (a cluster's several); empty while not connected",
    }),
    master_changes: Type.Integer({ description: 'Times the master changed since the start: failovers seen' }),
    last_master_change: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { description: 'Absent without Redis' },
)

const LIVENESS_SCHEMA = {
  operationId: 'getLiveness',
  summary: 'Liveness: the process is up (no store is asked)',
  tags: ['operations'],
  response: { 200: Type.Object({ status: Type.Literal('ok') }) },
}

const READINESS_SCHEMA = {
  operationId: 'getReadiness',
  summary: 'Readiness: Postgres was reached since the start, and shutdown has not begun',
  description:
    `\`checks\` says whether each store answers now (each gets ${READINESS_TIMEOUT_MS} ms); an outage after the first ` +
    'contact with Postgres is reported there but keeps the answer 200. 503 (application/problem+json, code not_ready): ' +
    'Postgres has not been reached since the start, or the gateway is shutting down.',
  tags: ['operations'],
  response: {
    200: Type.Object({ status: Type.Literal('ready'), checks: Checks, redis: Type.Optional(RedisState) }),
    503: Type.Unknown(),
  },
}

/** The Redis part of `/readyz`: the topology and its masters, absent without Redis. */
function redisState(cache: HealthOptions['cache']) {
  const masters = cache.redisMasters
  if (masters === null) return {}
  return {
    redis: {
      topology: masters.topology,
      masters: masters.masters,
      master_changes: masters.changes,
      last_master_change: masters.lastChangeAt,
    },
  }
}

export const healthRoutes: FastifyPluginAsync<HealthOptions> = async (
  app,
  { sql, probeSql = sql, cache, readiness },
) => {
  app.get('/healthz', { schema: LIVENESS_SCHEMA }, async () => ({ status: 'ok' as const }))

  app.get('/readyz', { schema: READINESS_SCHEMA }, async (request, reply) => {
    const [postgres, redis] = await Promise.all([
      postgresAnswers(probeSql, READINESS_TIMEOUT_MS),
      cache.ping(READINESS_TIMEOUT_MS),
    ])
    const checks = { postgres, redis }
    if (!readiness.draining && hasReachedPostgres(sql))
      return { status: 'ready' as const, checks, ...redisState(cache) }
    const detail = readiness.draining
      ? 'the gateway is shutting down'
      : `postgres cannot be reached (no answer within ${READINESS_TIMEOUT_MS} ms, or not connected), and has not been since the gateway started`
    // The problem envelope of docs/api.md, with the checks as an extension member (RFC 9457 §3.2).
    return reply
      .code(503)
      .type(PROBLEM_CONTENT_TYPE)
      .serializer(JSON.stringify)
      .send({ ...problem('not_ready', detail, request.id), checks, draining: readiness.draining })
  })
}
