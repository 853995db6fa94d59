// What the request log keeps of an answered request (docs/api.md, Request log): who, as whom,
// what, and what came of it; never a header, a body, a query string or a secret.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Principal } from '../auth/principal.js'
import { decidedAllowed, decisionOf } from '../http/decision-mark.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The prefix of the proxied route that took the request (set by the proxy's admission step). */
    routePrefix: string
    /** The request units of that route's requests, its `cost` (set with routePrefix). */
    routeCost: number
    /** The shadow limits that would have refused it (set by the proxy's limit gate); null: none. */
    limitsWouldRefuse: readonly string[] | null
  }
  interface FastifyReply {
    /** The problem code of a refusal (http/error-handler.ts); null for any other answer. */
    problemCode: string | null
  }
}

/**
 * How a request's exchange ended (docs/api.md, Request log): its answer went whole
 * (`completed`), or its client left or reset before the last byte (`client_aborted`), or its
 * upstream broke off (`upstream_aborted`), or it was only decided (`decided`: AUTHZ_PORT, its
 * upstream's answer unknown). Kept as text: later kinds of ending add values.
 */
export type RequestOutcome = 'completed' | 'client_aborted' | 'upstream_aborted' | 'decided'

/** One answered request, as the request log keeps it (docs/api.md, Request log). */
export interface RequestRecord {
  id: string
  /** The id is the client's X-Request-Id, not one the gateway made. */
  idGiven: boolean
  /** When the request arrived, ms since the epoch. */
  timeMs: number
  accountId: string
  tenantId: string
  keyId: string
  method: string
  /** The route's prefix, or `management`. */
  route: string
  /** The path without its query string. */
  path: string
  status: number
  /** The problem code of a refusal; null for an answer that is not one. */
  code: string | null
  durationMs: number
  requestBytes: number
  responseBytes: number
  sourceIp: string
  /** The route's cost (docs/api.md, Units); 0 for a management request. */
  cost: number
  /** The proxy handed it to its upstream (what counted its units), rather than refused it. */
  forwarded: boolean
  /** The units the upstream reported, by meter, as JSON; null when it reported none. */
  units: string | null
  /** The shadow limits that would have refused it, their policies joined by commas; absent or null: none. */
  wouldRefuse?: string | null
  /** How its exchange ended; absent: `completed`. */
  outcome?: RequestOutcome
  /** The cell that served it (docs/api.md, Cells); absent or null: none. */
  cell?: string | null
  /** Its trace's id (32 hex digits), with tracing on; absent or null: not traced. */
  traceId?: string | null
}

/** A declared length in bytes; 0 when none is declared. */
function declaredBytes(value: string | number | string[] | undefined): number {
  if (value === undefined) return 0
  const bytes = Number(value)
  return Number.isSafeInteger(bytes) && bytes >= 0 ? bytes : 0
}

/**
 * The record of a request answered for `caller` (its key and that key's tenant; the refused key
 * of a 401 once it is known). `proxied`: a route of the route table, rather than management.
 */
export function recordOf(
  request: FastifyRequest,
  reply: FastifyReply,
  caller: Principal,
  proxied: boolean,
  responseBytes: number,
): RequestRecord {
  const url = request.url
  const query = url.indexOf('?')
  const tenant = caller.tenant
  const elapsed = reply.elapsedTime
  return {
    id: request.id,
    idGiven: request.headers['x-request-id'] === request.id,
    timeMs: Date.now() - elapsed,
    accountId: tenant.parentId ?? tenant.id,
    tenantId: (request.actingTenant ?? tenant).id,
    keyId: caller.key.id,
    method: request.method,
    route: proxied ? request.routePrefix : 'management',
    path: query === -1 ? url : url.slice(0, query),
    status: reply.statusCode,
    code: reply.problemCode,
    durationMs: elapsed,
    // A chunked body has no length but the bytes the proxy passed on (none known elsewhere).
    requestBytes: declaredBytes(request.headers['content-length']) || (request.exchange?.chunkedBodyBytes ?? 0),
    responseBytes,
    sourceIp: request.ip,
    cost: proxied ? request.routeCost : 0,
    forwarded: proxied && (request.upstreamSentAt > 0 || decidedAllowed(request.raw, reply.statusCode)),
    units: unitsOf(request.exchange?.reported),
    // Only on the proxy's routes, and rarely set there.
    wouldRefuse: request.limitsWouldRefuse?.join(',') ?? null,
    outcome: request.exchange?.outcome() ?? (decisionOf(request.raw) === null ? 'completed' : 'decided'),
    // Set by the proxy's cell step, on a route with cells only.
    cell: request.cell ?? null,
    traceId: request.trace?.traceId ?? null,
  }
}

/**
 * Reported units as the log keeps them: a JSON object, or null when there were none. Written by
 * hand: meter names are `[a-z0-9_]` and units whole numbers, and this runs for every metered answer.
 */
function unitsOf(reported: ReadonlyMap<string, number> | null | undefined): string | null {
  if (reported == null) return null
  let json = '{'
  for (const [meter, units] of reported) json += `${json.length === 1 ? '' : ','}"${meter}":${units}`
  return `${json}}`
}

/** The bytes of the answer's body: the upstream's answer passed on, else the gateway's own Content-Length. */
// The exchange is undefined outside the proxy's scopes (it is decorated there).
export function responseBytesOf(
  reply: FastifyReply,
  exchange: { answerBytes(): number | null } | null | undefined,
): number {
  const passedOn = exchange?.answerBytes() ?? null
  if (passedOn !== null) return passedOn
  // fastify's own copy of the headers: it hands them to writeHead, so the raw response has none.
  const declared = reply.getHeader('content-length')
  return declared === undefined ? 0 : declaredBytes(declared)
}
