// The management API's own hooks, registered inside its plugin so that they run for its routes
// only: the marking of its routes' kind, and the deadline of a management call.
import type { FastifyInstance } from 'fastify'
import { ApiError } from '../errors.js'

/** How long a management call may take before it is answered 503 store_unavailable. */
export const MANAGEMENT_DEADLINE_MS = 1_500

declare module 'fastify' {
  interface FastifyRequest {
    /** The management deadline's timer, cleared when the response is done. */
    deadline: NodeJS.Timeout | null
  }
}

/** Marks every route of the scope as management, for the metrics and the request line. */
export function markManagementRoutes(scope: FastifyInstance): void {
  scope.addHook('onRoute', (route) => {
    route.config = { ...route.config, kind: 'management' }
  })
}

/**
 * A management call waits on nothing but Postgres: past its deadline the answer is 503
 * store_unavailable, so that a partition does not hang it until a TCP timeout. (Fastify's own
 * handlerTimeout is cleared when a request body has been read, so it misses writes.) Added before
 * the tenancy check, so that the deadline covers its lookups too.
 */
export function addManagementDeadline(scope: FastifyInstance): void {
  scope.decorateRequest('deadline', null)
  scope.addHook('onRequest', (request, reply, done) => {
    request.deadline = setTimeout(() => {
      if (!reply.sent) reply.send(new ApiError('store_unavailable', 'the store did not answer in time; try again'))
    }, MANAGEMENT_DEADLINE_MS)
    done()
  })
  scope.addHook('onResponse', (request, _reply, done) => {
    if (request.deadline !== null) clearTimeout(request.deadline)
    done()
  })
}
