// What every answered request leaves behind, in one onResponse hook: the metrics by route kind,
// the request line, and the tenant's usage. One hook, and the route's kind read once, because it
// runs for every proxied request (bench:proxy measures it; fastify builds `routeOptions` anew at
// each read). fastify calls onResponse only for an answer that ended whole (the response's
// 'finish', or its rare 'error'): a forwarded request whose answer was cut short, by its client or
// its upstream, is counted by its exchange when the client's side closes (proxy/exchange.ts), once.
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { TenantRecord } from '../shared/tenancy-records.js'
import { routeKindOf } from '../http/route-kind.js'
import { recordOf, responseBytesOf } from '../request-log/capture.js'
import { logRequest } from './logging.js'
import type { Limits } from '../limits/types.js'
import { REQUESTS_METER } from '../usage/meter.js'
import { decidedAllowed } from '../http/decision-mark.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** What the onResponse hook leaves behind for a request: metrics, request line, usage. */
    accountRequest(request: FastifyRequest, reply: FastifyReply): void
  }
}

export interface RequestAccountingOptions {
  /** Write the request line (fastify's own request logging is off). */
  logRequests: boolean
}

/** Stands in for a refused key's tenant until it is looked up. */
const NO_TENANT: TenantRecord = { id: '', parentId: null, externalId: null, status: 'active' }

export const requestAccounting = fp<RequestAccountingOptions>(
  async (app, { logRequests }) => {
    const metrics = app.metrics
    const meter = app.usageMeter
    const requestLog = app.requestLog
    // The units of the records the log drops, counted apart: reconciliation's `log_dropped`.
    // It runs where the log drops rows (a request's add, a failed write's put-back): never a throw there.
    if (requestLog !== null)
      requestLog.buffer.onDropped = (row) => {
        try {
          row.forEachForwarded((...dropped) => meter.logDropped(...dropped))
        } catch (err) {
          app.log.warn({ err }, 'request log: the units of a dropped row were not counted')
        }
      }
    const account = (request: FastifyRequest, reply: FastifyReply): void => {
      // A proxied exchange has two ends that may both come (onResponse on an 'error', then the
      // exchange's close): it counts at the first. Undefined outside the proxy's scopes.
      const exchange = request.exchange
      if (exchange != null) {
        if (exchange.accounted) return
        exchange.accounted = true
      }
      // A request that held an upstream slot was proxied (only the proxy's scopes have the field):
      // known without fastify's routeOptions, an object it builds anew at each read.
      const kind = exchange ? 'proxy' : routeKindOf(request)
      const trace = request.trace
      if (trace === null) metrics.observeRequest(kind, reply.statusCode, reply.elapsedTime / 1000)
      else {
        trace.finish(request, reply)
        // A sampled trace is the duration's exemplar: a spike on the histogram opens its trace.
        metrics.observeRequest(kind, reply.statusCode, reply.elapsedTime / 1000, trace.sampled ? trace.traceId : null)
      }
      if (logRequests) logRequest(app.log, kind, request, reply)
      const proxied = kind === 'proxy'
      // A decision let through counts as forwarded (AUTHZ_PORT: the asking proxy forwards it).
      const forwarded = proxied && (request.upstreamSentAt > 0 || decidedAllowed(request.raw, reply.statusCode))
      if (proxied) metrics.proxy.proxiedRequests.inc()
      // Usage: every proxied request, and every refusal once a key authenticated, for the tenant
      // it acted as (the key's own when the refusal came before that was resolved; docs/api.md).
      // Forwarded: the proxy handed it to the upstream (proxy/plugin.ts stamps upstreamSentAt as
      // it writes the upstream's headers); a gateway refusal never gets that far. Quotas count these.
      const principal = request.principal
      if (principal !== null) {
        meter.keyUsed(principal.key.id)
        // A forwarded request counts its route's cost in request units, and the units its upstream reported.
        // And what its limits took of it (reconciliation).
        if (proxied || reply.statusCode >= 400)
          meter.record(
            (request.actingTenant ?? principal.tenant).id,
            reply.statusCode,
            forwarded,
            principal.key.id,
            exchange?.cost ?? request.routeCost,
            exchange?.reported ?? null,
            chargedOf(request, REQUESTS_METER),
            exchange?.reported == null ? null : (meter) => chargedOf(request, meter),
          )
        requestLog?.add(recordOf(request, reply, principal, proxied, responseBytesOf(reply, request.exchange)))
      } else if (request.refusedKey !== null && requestLog !== null) {
        // A 401 for a key that exists: logged for its account once its tenant is known (after the
        // answer, so that it took no longer than an unknown key's).
        const key = request.refusedKey
        const record = recordOf(
          request,
          reply,
          { key, tenant: NO_TENANT },
          kind === 'proxy',
          responseBytesOf(reply, null),
        )
        app.tenancyCache.lookups.tenant(key.tenantId).then(
          (tenant) => {
            if (tenant === null) return
            record.accountId = tenant.parentId ?? tenant.id
            record.tenantId = tenant.id
            requestLog.add(record)
          },
          () => {}, // the store is down: the log loses this one record, nothing else does
        )
      }
    }
    app.addHook('onResponse', (request, reply, done) => {
      account(request, reply)
      done()
    })
    // A WebSocket's upgrade is never 'answered' as fastify sees it (the socket is taken over):
    // the proxy counts it here itself once the handshake is done (proxy/websocket/runtime.ts); so
    // does an exchange whose answer was cut short (proxy/exchange.ts).
    app.decorate('accountRequest', account)
  },
  { name: 'request-accounting', dependencies: ['metrics', 'usage-meter', 'request-log'] },
)

/**
 * What the limits of one meter took of it, for reconciliation: its units (true), or nothing though
 * some applied (false), or none of that meter applied (null). Outside the proxy's scope neither
 * field is decorated.
 */
function chargedOf(request: FastifyRequest, meter: string): boolean | null {
  const subjects = request.limitSubjects
  if (subjects == null || subjects.length === 0) return null
  for (const subject of subjects) if (limitsMeter(subject.limits, meter)) return request.limitsCharged === true
  return null
}

/** Whether these limits count this meter: `requests` (a rate or a quota), or a route meter's. */
function limitsMeter(limits: Limits, meter: string): boolean {
  if (meter === REQUESTS_METER) return limits.rate !== null || limits.monthlyQuota !== null
  return (
    (limits.meters?.some((limit) => limit.meter === meter) ?? false) ||
    (limits.credits?.some((credit) => credit.meter === meter) ?? false)
  )
}
