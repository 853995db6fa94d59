// AUTHZ_PORT (docs/forward-auth.md): a listener of its own for the proxies in front that ask
// whether to let a request through, and for services that verify a key themselves. It serves
// only /nginx, /forward-auth, /envoy/<path> and POST /verify, never on PORT; each is turned into
// the request it asks about (endpoints.ts, verify.ts), marked as a decision
// (http/decision-mark.ts), and handed to the app's router, where the proxy's own steps decide it
// (proxy/decision.ts). Nothing is proxied from here.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { ApiError, problem, PROBLEM_CONTENT_TYPE } from '../errors.js'
import { type DecisionKind, markDecision } from '../http/decision-mark.js'
import { requestId } from '../http/request-id.js'
import { HEADERS_TIMEOUT_MS, KEEP_ALIVE_TIMEOUT_MS, limitConnections, serverOptions } from '../http/server-limits.js'
import { VERIFY_PATH } from '../shared/paths.js'
import { originalRequest } from './endpoints.js'
import { readBody, verifyQuestion } from './verify.js'

export interface DecisionListener {
  readonly server: Server
  readonly port: number
  /** Stops accepting and waits for the decisions in flight (the drain: start.ts). */
  close(): Promise<void>
}

/** A refusal of the listener itself (an unknown path, a field missing), as problem+json. */
function refuse(raw: IncomingMessage, response: ServerResponse, error: ApiError): void {
  const id = requestId(raw)
  const body = JSON.stringify(problem(error.code, error.detail, id, error.options.errors))
  response.writeHead(error.status, {
    'content-type': PROBLEM_CONTENT_TYPE,
    'content-length': Buffer.byteLength(body),
    'x-request-id': id,
  })
  response.end(body)
}

/**
 * nginx's auth_request acts on 2xx, 401 and 403 only (anything else is its 500), and /verify
 * answers 200 whatever it decided: the status line says so, while the app, and so the request
 * log, usage and metrics, keep the decision's own status (the real one is in X-Tgw-Status).
 */
function shapeStatusLine(response: ServerResponse, kind: DecisionKind): void {
  if (kind !== 'nginx' && kind !== 'verify') return
  const writeHead = response.writeHead
  response.writeHead = function shaped(this: ServerResponse, status: number, ...rest: unknown[]) {
    const shown = status < 300 || kind === 'verify' ? 200 : status === 401 ? 401 : 403
    const written = (writeHead as (...args: unknown[]) => ServerResponse).call(this, shown, ...rest)
    this.statusCode = status
    return written
  } as ServerResponse['writeHead']
}

/** Hands the request, now the one asked about, to the app's router. */
function decide(app: FastifyInstance, raw: IncomingMessage, response: ServerResponse, kind: DecisionKind): void {
  // The asking request's own body (there should be none) is not the original's: never parsed,
  // and no 100 Continue is owed for it (the proxy in front answers the client's Expect).
  delete raw.headers['content-length']
  delete raw.headers['transfer-encoding']
  delete raw.headers.expect
  raw.resume()
  shapeStatusLine(response, kind)
  app.routing(raw, response)
}

async function verify(app: FastifyInstance, raw: IncomingMessage, response: ServerResponse): Promise<void> {
  const text = await readBody(raw)
  if (text instanceof ApiError) return refuse(raw, response, text)
  const question = verifyQuestion(text)
  if (question instanceof ApiError) return refuse(raw, response, question)
  // The question as a request: its key, acting header, method and path; the caller's address
  // (and X-Forwarded-For, read under TRUSTED_PROXIES as on PORT) and request id stay its own.
  const headers: IncomingMessage['headers'] = { authorization: `Bearer ${question.key}` }
  for (const name of ['host', 'x-forwarded-for', 'x-request-id'] as const)
    if (raw.headers[name] !== undefined) headers[name] = raw.headers[name] as string
  if (question.actingTenant !== null) headers['x-service-acting-tenant'] = question.actingTenant
  raw.headers = headers
  raw.method = question.method
  raw.url = question.path
  markDecision(raw, { kind: 'verify', cost: question.cost })
  shapeStatusLine(response, 'verify')
  app.routing(raw, response)
}

function handle(app: FastifyInstance, raw: IncomingMessage, response: ServerResponse): void {
  const path = (raw.url ?? '/').split('?', 1)[0]
  if (path === VERIFY_PATH && raw.method === 'POST') {
    // Its body is the question: a client that waits for 100 Continue is told to send it.
    if (raw.headers.expect?.toLowerCase() === '100-continue') response.writeContinue()
    verify(app, raw, response).catch((err: Error) => {
      app.log.warn({ err }, 'authz: a /verify request failed')
      if (!response.headersSent) refuse(raw, response, new ApiError('bad_request', 'the body could not be read'))
      else response.destroy()
    })
    return
  }
  const original = path === VERIFY_PATH ? new ApiError('route_not_found', 'POST /verify only') : originalRequest(raw)
  if (original instanceof ApiError) {
    raw.resume()
    refuse(raw, response, original)
    return
  }
  raw.method = original.method
  raw.url = original.url
  if (original.host !== undefined) raw.headers.host = original.host
  markDecision(raw, { kind: original.kind, cost: null })
  decide(app, raw, response, original.kind)
}

/**
 * Listens on AUTHZ_PORT; the listener is closed before the app, on the drain (start.ts). It holds
 * at most `maxConnections` (MAX_CONNECTIONS, as PORT: the proxies in front keep theirs open).
 */
export async function listenForDecisions(
  app: FastifyInstance,
  port: number,
  host: string,
  maxConnections = 10_000,
  headersTimeoutMs = HEADERS_TIMEOUT_MS,
): Promise<DecisionListener> {
  // Without its hooks, the app would run a decision about /v1/sub-accounts as a management call.
  if (!app.decides) throw new Error('the app was built without AUTHZ_PORT: it cannot be handed decisions')
  const server = createServer(serverOptions(headersTimeoutMs), (raw, response) => handle(app, raw, response))
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS
  limitConnections(server, maxConnections)
  // A question carrying the client's Expect: 100-continue is answered with the decision alone,
  // never a 100 first (which nginx's auth_request would take for the answer).
  server.on('checkContinue', (raw, response) => handle(app, raw, response))
  // A socket error on a connection of a proxy that went away: the connection's end, nothing more.
  server.on('clientError', (_err, socket) => socket.destroy())
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeIdleConnections()
      }),
  }
}
