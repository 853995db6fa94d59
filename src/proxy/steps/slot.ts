// The last check: one of the route's upstream slots (proxy/concurrency.ts), within the tenant's
// and the parent account's shares. A request that must wait gives its place back if its client
// leaves. Once held, the slot belongs to the request's Exchange, which gives it back when the
// exchange is over, whatever ends it: nothing for this step to undo.
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ApiError } from '../../errors.js'
import type { StepFactory } from '../options.js'
import { RouteConcurrency, type SlotHolder, type SlotRefusal } from '../concurrency.js'
import { Exchange } from '../exchange.js'
import { ResponseWatch } from '../response-watch.js'
import { ABANDONED, type Verdict } from '../pipeline.js'
import type { ProxyRoute } from '../route.js'

const RETRY_SOON = { 'retry-after': '1' }

function busy(refusal: SlotRefusal, route: ProxyRoute): ApiError {
  if (refusal === 'tenant_busy')
    return new ApiError(
      'too_many_concurrent_requests',
      `this tenant already has ${route.maxConnectionsPerTenant} requests in flight on this route`,
      { headers: RETRY_SOON },
    )
  return refusal === 'account_busy'
    ? new ApiError(
        'too_many_concurrent_requests',
        `this account and its sub-accounts already have ${route.maxConnectionsPerAccount} requests in flight on this route`,
        { headers: RETRY_SOON },
      )
    : new ApiError('upstream_busy', `every connection to this route's upstream stayed busy for ${route.timeoutMs} ms`, {
        headers: RETRY_SOON,
      })
}

/** The tenant a request acts as, and the parent account its key belongs to: whose shares it takes. */
function slotHolder(request: FastifyRequest): SlotHolder {
  const keyTenant = request.principal!.tenant
  return { tenantId: request.actingTenant!.id, accountId: keyTenant.parentId ?? keyTenant.id }
}

export const slotStep: StepFactory = (route, { upstreamSlots, clientAborts, account }) => {
  const slots = new RouteConcurrency(
    route.maxConnections,
    route.maxConnectionsPerTenant,
    route.maxConnectionsPerAccount,
    route.timeoutMs,
  )
  upstreamSlots?.set(route.prefix, () => ({ held: slots.active, waiting: slots.waiting }))
  const responses = new ResponseWatch(route.responseIdleTimeoutMs)

  /** The slot is held: the exchange owns it from now on. */
  function hold(request: FastifyRequest, reply: FastifyReply, holder: SlotHolder | null): Verdict {
    request.exchange = new Exchange(slots, holder, request, reply, clientAborts, responses, account, route.cost)
    // A client that left just as the slot came: its Exchange gave the slot back and logged it.
    return request.exchange.clientGone() ? ABANDONED : undefined
  }

  return {
    name: 'slot',
    check(request, reply) {
      const holder = route.public ? null : slotHolder(request)
      const attempt = slots.take(holder)
      if (attempt === 'taken') return hold(request, reply, holder)
      if (attempt !== 'wait') return busy(attempt, route)
      return new Promise<Verdict>((resolve) => {
        // A waiting request whose client leaves gives up its place and its shares at once.
        const leave = () => {
          slots.withdraw(granted)
          resolve(ABANDONED)
        }
        const granted = (refusal: SlotRefusal | null) => {
          reply.raw.off('close', leave)
          resolve(refusal === null ? hold(request, reply, holder) : busy(refusal, route))
        }
        slots.wait(holder, granted)
        reply.raw.once('close', leave)
      })
    },
  }
}
