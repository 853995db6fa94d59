// Health (docs/operations.md): /healthz says the process is alive and asks nothing of the stores, so a
// Postgres outage never gets the pods restarted; /readyz says whether this replica should get
// traffic: Postgres and Redis answer within a short timeout, and shutdown has not begun.
import type { FastifyPluginAsync } from 'fastify'
import { Type } from 'typebox'
import type { TenancyCache } from '../cache/tiered.js'
import { PROBLEM_CONTENT_TYPE, problem } from '../errors.js'
import { withDeadline, type Sql } from '../store/db.js'

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
  sql: Sql
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
    description: 'off: no REDIS_URL, in-process cache only',
  }),
})

export const healthRoutes: FastifyPluginAsync<HealthOptions> = async (app, { sql, cache, readiness }) => {
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness: the process is up (no store is asked)',
        tags: ['operations'],
        response: { 200: Type.Object({ status: Type.Literal('ok') }) },
      },
    },
    async () => ({ status: 'ok' as const }),
  )

  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness: Postgres and Redis answer, and shutdown has not begun',
        description: `503 (application/problem+json, code not_ready) names what failed in \`checks\`; each store gets ${READINESS_TIMEOUT_MS} ms.`,
        tags: ['operations'],
        response: { 200: Type.Object({ status: Type.Literal('ready'), checks: Checks }), 503: Type.Unknown() },
      },
    },
    async (request, reply) => {
      const [postgres, redis] = await Promise.all([postgresAnswers(sql, READINESS_TIMEOUT_MS), cache.ping(READINESS_TIMEOUT_MS)])
      const failed = [postgres === 'down' ? 'postgres' : null, redis === 'down' ? 'redis' : null].filter((name) => name !== null)
      if (!readiness.draining && failed.length === 0) return { status: 'ready' as const, checks: { postgres, redis } }
      const detail = readiness.draining
        ? 'the gateway is shutting down'
        : `${failed.join(' and ')} cannot be reached (no answer within ${READINESS_TIMEOUT_MS} ms, or not connected)`
      // The problem envelope of docs/api.md, with the checks as an extension member (RFC 9457 §3.2).
      return reply
        .code(503)
        .type(PROBLEM_CONTENT_TYPE)
        .serializer(JSON.stringify)
        .send({ ...problem('not_ready', detail, request.id), checks: { postgres, redis }, draining: readiness.draining })
    },
  )
}
