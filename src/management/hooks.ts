// The management API's own hooks, registered inside its plugin so that they run for its routes
// only (routes.ts lists them in order, MANAGEMENT_HOOKS): the marking of its routes' kind, the
// refusal of a query its route does not take, the deadline of a management call's store work,
// and the deadline of its body.
import { PassThrough } from 'node:stream'
import type { FastifyInstance, FastifyReply, FastifyRequest, preParsingHookHandler, RouteOptions } from 'fastify'
import { ApiError } from '../errors.js'
import { NoQuery } from '../schemas/common.js'
import { stoppedBy, unstoppable } from '../store/call-statements.js'
import { storeDeadlinesOf } from '../store/deadlines.js'

/** How long a management body may take to arrive, once its reading starts: past it, 408 request_timeout. */
export const MANAGEMENT_BODY_TIMEOUT_MS = 10_000

/**
 * The same for a body its handler reads as a stream (a key import, up to 64 MiB: about a minute
 * at 1 MB/s, with room to spare).
 */
export const STREAMED_BODY_TIMEOUT_MS = 120_000

interface ManagementTimers {
  /** The store deadline's timer, while it runs. */
  store: NodeJS.Timeout | null
  /** What is left of the store deadline, and since when it runs. */
  storeLeftMs: number
  storeSince: number
  /** The body deadline's timer, while the body is read. */
  body: NodeJS.Timeout | null
  /** The store deadline answered 503: the handler may still run, its answer will find the reply sent. */
  answered: boolean
  /** Aborted when the store deadline answers 503: the call's statements stop (dropLateAnswers). */
  readonly stop: AbortController
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The management deadlines' timers, cleared when the response is done. */
    deadline: ManagementTimers | null
  }
}

/** onRoute: marks a route of the scope as management, for the metrics and the request line. */
export function markManagementRoute(route: RouteOptions): void {
  route.config = { ...route.config, kind: 'management' }
}

/**
 * onRoute: a route that declares no query takes none, so an unknown parameter is refused (400
 * validation_failed naming `/querystring/<name>`), never ignored while the change is made
 * (docs/api.md, Conventions). Here rather than in each route's schema, so that a route cannot
 * forget it; one that declares its own query (a page, `include`) keeps it as it is. The schema is
 * replaced, never changed in place: the operation tables' schemas are shared by every app.
 */
export function refuseUnknownQuery(route: RouteOptions): void {
  if (route.schema?.querystring !== undefined) return
  route.schema = { ...route.schema, querystring: NoQuery }
}

function runStoreDeadline(timers: ManagementTimers, reply: FastifyReply): void {
  timers.storeSince = performance.now()
  timers.store = setTimeout(() => {
    if (reply.sent) return
    timers.answered = true
    timers.stop.abort(new ApiError('store_unavailable', 'the store did not answer in time; try again'))
    reply.send(new ApiError('store_unavailable', 'the store did not answer in time; try again'))
  }, timers.storeLeftMs)
}

function pauseStoreDeadline(timers: ManagementTimers): void {
  if (timers.store === null) return
  clearTimeout(timers.store)
  timers.store = null
  timers.storeLeftMs = Math.max(0, timers.storeLeftMs - (performance.now() - timers.storeSince))
}

function clearBodyDeadline(timers: ManagementTimers): void {
  if (timers.body !== null) clearTimeout(timers.body)
  timers.body = null
}

/** Whether fastify will read a body for this request (a length other than 0, or chunked). */
export function hasBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length']
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0')
}

/** Whether this answer is the store deadline's 503, sent while the handler may still run. */
export const answeredByStoreDeadline = (request: FastifyRequest): boolean => request.deadline?.answered === true

/**
 * Ends the store deadline early: the answer is on its way and must not be replaced by a 503
 * while an onSend hook still writes to the store (management/idempotency.ts bounds its own write).
 */
export function stopStoreDeadline(request: FastifyRequest): void {
  const timers = request.deadline
  if (timers !== null) pauseStoreDeadline(timers)
  // Nothing cancels the call's statements now: none need be remembered (a streamed answer's).
  unstoppable()
}

/**
 * Runs `work` that waits on something other than the store (a webhook URL's name resolving) with
 * the store deadline paused, as while the body is read: its own bound is `work`'s to keep, and its
 * slowness is never answered 503 store_unavailable. The deadline goes on with what is left after.
 */
export async function outsideStoreDeadline<T>(request: FastifyRequest, reply: FastifyReply, work: () => Promise<T>) {
  const timers = request.deadline
  if (timers === null || timers.store === null) return work()
  pauseStoreDeadline(timers)
  try {
    return await work()
  } finally {
    if (timers.store === null && !reply.sent) runStoreDeadline(timers, reply)
  }
}

/**
 * Two deadlines (docs/api.md, docs/decisions/0240-deadlines.md,
 * docs/decisions/0242-the-management-deadline-counts-store-work-only.md). The store deadline: a
 * management call waits on nothing but Postgres, so past its deadline of store work
 * (store/deadlines.ts) the answer is 503 store_unavailable, and a partition does not hang it until
 * a TCP timeout. It runs from onRequest (it covers the tenancy lookups, whose hook comes after this
 * one), pauses while the body is read, and goes on with what is left before validation and the
 * handler. (Fastify's own handlerTimeout is cleared when a request body has been read, so it misses
 * writes.) The body deadline: the whole body must arrive within `bodyTimeoutMs` of the start of its
 * reading, or it is 408 request_timeout and the connection is closed; a slow client is never blamed
 * on the store. These are its hooks, each in its phase; `addManagementDeadline` adds them all to a
 * scope.
 */

/** onRequest: the store deadline starts. */
export function startStoreDeadline(request: FastifyRequest, reply: FastifyReply, done: () => void): void {
  const timers: ManagementTimers = {
    store: null,
    storeLeftMs: storeDeadlinesOf(request.server)[request.routeOptions.config.storeDeadline ?? 'managementMs'],
    storeSince: 0,
    body: null,
    answered: false,
    stop: new AbortController(),
  }
  request.deadline = timers
  runStoreDeadline(timers, reply)
  done()
}

/** preParsing: the store deadline pauses while the body is read, which must end within `bodyTimeoutMs`. */
export function bodyDeadline(
  bodyTimeoutMs: number,
  streamedTimeoutMs = STREAMED_BODY_TIMEOUT_MS,
): preParsingHookHandler {
  return (request, _reply, payload, done) => {
    const timers = request.deadline!
    pauseStoreDeadline(timers)
    if (!hasBody(request)) return done(null, payload)
    const timeoutMs = request.routeOptions.config.streamedBody === true ? streamedTimeoutMs : bodyTimeoutMs
    // The body parser reads this stream: destroyed at the deadline, it fails the parse with the 408.
    const timed = new PassThrough()
    timed.on('error', () => {}) // the parser hears it; nothing else must
    payload.on('error', (err) => timed.destroy(err))
    payload.pipe(timed)
    timers.body = setTimeout(() => {
      timers.body = null
      timed.destroy(
        new ApiError('request_timeout', `the request body did not arrive within ${timeoutMs} ms`, {
          headers: { connection: 'close' },
        }),
      )
    }, timeoutMs)
    // A client gone mid-body gets no answer, so onResponse never clears the deadline: the request's
    // close does, or its timer would outlive it (two minutes for a key import's body).
    request.raw.once('close', () => clearBodyDeadline(timers))
    done(null, timed)
  }
}

/**
 * preValidation: the body has arrived; the store deadline goes on with what is left. A body the
 * handler reads as a stream has not: its handler calls `streamedBodyRead` once it has.
 */
export function resumeStoreDeadline(request: FastifyRequest, reply: FastifyReply, done: () => void): void {
  if (request.routeOptions.config.streamedBody === true) {
    done()
    return
  }
  const timers = request.deadline!
  clearBodyDeadline(timers)
  if (timers.store === null) runStoreDeadline(timers, reply)
  done()
}

/** A streamed body has been read (its handler's): the body deadline ends, the store deadline goes on. */
export function streamedBodyRead(request: FastifyRequest, reply: FastifyReply): void {
  const timers = request.deadline
  if (timers === null) return
  clearBodyDeadline(timers)
  if (timers.store === null && !reply.sent) runStoreDeadline(timers, reply)
}

/**
 * onRoute: a handler's statements through a `cancellable` pool (the scope's, app-surface-options.ts) are
 * cancelled when the store deadline answers 503 (store/call-statements.ts): none runs on for an
 * answer nobody waits for. The handler then ends with their error, or with what it made of it: an
 * outcome nobody waits for either, which fastify would log again (an error at level error, an
 * answer as a warning), a client able to cause both at will; it is dropped.
 */
export function dropLateAnswers(route: RouteOptions): void {
  const handler = route.handler
  route.handler = function (this: FastifyInstance, request, reply) {
    const stop = request.deadline?.stop.signal
    const run = () => handler.call(this, request, reply)
    const answer = stop === undefined ? run() : stoppedBy(stop, run, request.trace)
    // A handler that answers through `reply` itself, later, is left as it is.
    if (!(answer instanceof Promise)) return answer
    return answer.then(
      (payload) => (answeredByStoreDeadline(request) ? undefined : payload),
      (err: unknown) => {
        if (!answeredByStoreDeadline(request)) throw err
        request.log.info({ err }, 'a call answered 503 at its store deadline ended late')
        return undefined
      },
    )
  }
}

/** onResponse: the deadlines' timers cleared. */
export function clearDeadlines(request: FastifyRequest, _reply: FastifyReply, done: () => void): void {
  const timers = request.deadline
  if (timers !== null) {
    if (timers.store !== null) clearTimeout(timers.store)
    clearBodyDeadline(timers)
  }
  done()
}

/** Adds the two deadlines' hooks to a scope (the management API's, the portal's API). */
export function addManagementDeadline(scope: FastifyInstance, bodyTimeoutMs = MANAGEMENT_BODY_TIMEOUT_MS): void {
  scope.decorateRequest('deadline', null)
  scope.addHook('onRequest', startStoreDeadline)
  scope.addHook('preParsing', bodyDeadline(bodyTimeoutMs))
  scope.addHook('preValidation', resumeStoreDeadline)
  scope.addHook('onRoute', dropLateAnswers)
  scope.addHook('onResponse', clearDeadlines)
}
