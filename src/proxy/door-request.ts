// The request and reply a proxied request has when the front door serves it (front-door.ts): the
// members of fastify's that the proxy's guards, steps, upstream call, error handler and request
// accounting read, and nothing else, so that the same code serves both doors. fastify builds its
// own pair, with its router, hooks and per-request logger, for every request the front door
// declines.
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { performance } from 'node:perf_hooks'
import type { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'

/** What fastify would report as the route of a proxied request (request.routeOptions). */
export interface DoorRouteOptions {
  readonly url: string
  readonly method: string
  readonly config: { readonly kind: 'proxy' }
}

/** Answers an error as fastify's error handler does (http/error-handler.ts, sendError). */
export type ErrorAnswer = (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => unknown

export class DoorRequest {
  readonly id: string
  readonly raw: IncomingMessage
  readonly server: FastifyInstance
  readonly routeOptions: DoorRouteOptions
  readonly is404 = false
  readonly body = undefined
  // The decorations of the gateway's plugins, as fastify's request starts them (app-server.ts,
  // proxy/plugin.ts, http/guards.ts).
  principal: FastifyRequest['principal'] = null
  actingTenant: FastifyRequest['actingTenant'] = null
  refusedKey: FastifyRequest['refusedKey'] = null
  routePrefix = ''
  routeCost = 1
  singleHeaders: FastifyRequest['singleHeaders'] = null
  upstreamSentAt = 0
  serviceIdentity: FastifyRequest['serviceIdentity'] = null
  exchange: FastifyRequest['exchange'] = null
  limitSubjects: FastifyRequest['limitSubjects'] = null
  limitsCharged = false
  limitUnits = 1
  limitsUntaken: FastifyRequest['limitsUntaken'] = null
  limitsWouldRefuse: FastifyRequest['limitsWouldRefuse'] = null
  /** Made at its first line: most requests write none. */
  private logger: FastifyBaseLogger | null = null

  constructor(id: string, raw: IncomingMessage, server: FastifyInstance, routeOptions: DoorRouteOptions) {
    this.id = id
    this.raw = raw
    this.server = server
    this.routeOptions = routeOptions
  }

  /** The request's child logger, made by the app's factory as fastify makes it (its request id bound). */
  get log(): FastifyBaseLogger {
    const server = this.server
    this.logger ??= server.childLoggerFactory.call(server, server.log, { reqId: this.id }, {}, this.raw)
    return this.logger
  }

  get headers(): IncomingHttpHeaders {
    return this.raw.headers
  }
  get url(): string {
    return this.raw.url!
  }
  get method(): string {
    return this.raw.method!
  }
  get socket(): Socket {
    return this.raw.socket
  }
  /** The peer: the front door serves no request behind TRUSTED_PROXIES (fastify reads the chain then). */
  get ip(): string | undefined {
    return this.raw.socket.remoteAddress
  }
  get protocol(): 'http' | 'https' {
    return (this.raw.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http'
  }
}

export class DoorReply {
  readonly raw: ServerResponse
  readonly request: DoorRequest
  /** Set by the error handler and the admission step: read by the request log. */
  problemCode: string | null = null
  /** The headers set before the answer's head is written, as fastify keeps them apart from Node's. */
  private readonly own: OutgoingHttpHeaders = {}
  private readonly startedAt = performance.now()
  private endedAt = -1
  private readonly answerError: ErrorAnswer
  /** The gateway's answers say Connection: close once it is draining (ops/readiness-plugin.ts). */
  private readonly draining: () => boolean

  constructor(raw: ServerResponse, request: DoorRequest, answerError: ErrorAnswer, draining: () => boolean) {
    this.raw = raw
    this.request = request
    this.answerError = answerError
    this.draining = draining
  }

  get log(): FastifyBaseLogger {
    return this.request.log
  }
  get statusCode(): number {
    return this.raw.statusCode
  }
  /** Milliseconds since the request came, until its answer ended. */
  get elapsedTime(): number {
    return (this.endedAt === -1 ? performance.now() : this.endedAt) - this.startedAt
  }
  /** The answer is over: its time stops. */
  ended(): void {
    if (this.endedAt === -1) this.endedAt = performance.now()
  }

  code(statusCode: number): this {
    this.raw.statusCode = statusCode
    return this
  }
  header(name: string, value: string | number | string[]): this {
    this.own[name.toLowerCase()] = value
    return this
  }
  headers(values: Record<string, string | number | string[]>): this {
    for (const name in values) this.header(name, values[name]!)
    return this
  }
  getHeader(name: string): OutgoingHttpHeaders[string] {
    return this.own[name.toLowerCase()]
  }
  /** The headers set so far: the upstream call writes the answer's head from them, once. */
  getHeaders(): OutgoingHttpHeaders {
    return this.own
  }
  type(contentType: string): this {
    return this.header('content-type', contentType)
  }
  /** The upstream call writes to the raw response itself. */
  hijack(): this {
    return this
  }

  /**
   * An error goes through the error handler, which sends its problem document here: the only
   * answers the gateway writes itself on a proxied route (the upstream call writes the others).
   */
  send(payload: Error | object): this {
    if (this.raw.headersSent) return this
    if (payload instanceof Error) {
      this.answerError(
        payload as FastifyError,
        this.request as unknown as FastifyRequest,
        this as unknown as FastifyReply,
      )
      return this
    }
    const body = JSON.stringify(payload)
    this.own['content-length'] = Buffer.byteLength(body)
    if (this.draining()) this.own.connection = 'close'
    this.raw.writeHead(this.raw.statusCode, this.own)
    this.raw.end(body)
    return this
  }
}
