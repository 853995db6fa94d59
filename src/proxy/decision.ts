// A decision (docs/forward-auth.md): a request marked by AUTHZ_PORT's listener runs the route's
// decision steps (checks.ts, DECISION_STEPS), the proxy's own up to its limits, and is answered
// here instead of going upstream. Allowed: 200 with what the upstream would have received from
// the gateway (the trusted headers), for the asking proxy to copy onto its upstream request; the
// request id and RateLimit fields are on the reply already (http/guards.ts, limit-gate.ts).
// Refused: the error handler's answer, as on PORT; only its shape for nginx and /verify is
// changed, by `shapeRefusal` below and the listener's status line.
import type { FastifyReply, FastifyRequest } from 'fastify'
import { type DecisionMark, decisionOf } from '../http/decision-mark.js'
import { CELL_HEADER, trustedIdentity } from './headers.js'
import { routeNotFound } from '../errors.js'
import { pathOf } from '../http/bad-paths.js'
import { routeKindOf } from '../http/route-kind.js'

/** A route's handler for a decision that every step let through. */
export function answerDecision(request: FastifyRequest, reply: FastifyReply, mark: DecisionMark): void {
  const identity = trustedIdentity(request)
  reply.code(200)
  if (mark.kind === 'verify') {
    reply.type('application/json')
    reply.send(verifiedBody(request, reply))
    return
  }
  // A public route injects nothing, so nothing is set: the proxy sends the headers empty (removed).
  if (identity !== null) {
    reply.header('x-service-resolved-tenant', identity.resolvedTenantId)
    reply.header('x-service-caller-tenant', identity.callerTenantId)
    reply.header('x-service-key-id', identity.keyId)
    reply.header('x-service-scopes', identity.scopes.join(' '))
    if (identity.assertion != null) reply.header('x-service-identity', identity.assertion)
    // Where the route has cells (steps/cell.ts): the proxy in front routes by it
    // (docs/forward-auth.md, a `map` from it to an upstream).
    if (request.cell != null) reply.header(CELL_HEADER, request.cell)
  }
  reply.send()
}

/** `/verify`'s answer to an allowed request (docs/api.md, POST /verify). */
function verifiedBody(request: FastifyRequest, reply: FastifyReply): string {
  const identity = trustedIdentity(request)
  const policy = reply.getHeader('ratelimit-policy')
  const current = reply.getHeader('ratelimit')
  return JSON.stringify({
    valid: true,
    key_id: identity?.keyId ?? null,
    caller_tenant_id: identity?.callerTenantId ?? null,
    resolved_tenant_id: identity?.resolvedTenantId ?? null,
    scopes: identity?.scopes ?? [],
    ratelimit: policy === undefined ? null : { policy: String(policy), current: String(current) },
  })
}

/**
 * An onRequest hook of the app: a decision is made only on a route of the route table. The
 * management API, the token endpoint, the health paths, the console: none of them is a proxied
 * path, so a decision asking about one is its 404, as on PORT for a path no route serves.
 */
export function decideOnlyProxiedPaths(
  request: FastifyRequest,
  _reply: FastifyReply,
  done: (err?: Error) => void,
): void {
  if (decisionOf(request.raw) === null || routeKindOf(request) === 'proxy') done()
  else done(routeNotFound(request.method, pathOf(request.url)))
}

/**
 * An onSend hook of the app: a refused decision's body as its asker reads it. nginx's
 * auth_request keeps no body and knows only 401 and 403: the status and the problem+json (one
 * line: JSON.stringify writes none) go in X-Tgw-Status and X-Tgw-Problem, and the listener turns
 * the status line into 401 or 403 (forward-auth/listener.ts). `/verify` answers 200 with
 * `{"valid": false, "code", "status"}`. Every other request passes untouched.
 */
export function shapeRefusal(
  request: FastifyRequest,
  reply: FastifyReply,
  payload: unknown,
  done: (err: null, payload: unknown) => void,
): void {
  const mark = decisionOf(request.raw)
  const status = reply.statusCode
  if (mark === null || status < 300) {
    done(null, payload)
    return
  }
  if (mark.kind === 'nginx') {
    reply.header('x-tgw-status', String(status))
    if (typeof payload === 'string') reply.header('x-tgw-problem', asciiOnly(payload))
  } else if (mark.kind === 'verify') {
    reply.type('application/json')
    reply.removeHeader('content-length')
    done(null, JSON.stringify({ valid: false, code: reply.problemCode ?? 'refused', status }))
    return
  }
  done(null, payload)
}

/** JSON with every character past ASCII escaped (`\u00e9`): still the same JSON, and a header value. */
function asciiOnly(json: string): string {
  return json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}
