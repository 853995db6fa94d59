// The proxy's front door (docs/lifecycle.md): a proxied request without a body is served from
// Node's 'request' event, before fastify's router, through the same request guards, steps,
// upstream call, error handler and accounting, on a request and reply of its own
// (door-request.ts). fastify's router, request and reply objects, hook runner and per-request
// logger were about a quarter of a proxied request's cost above the floor (bench/README.md).
//
// The door takes a request only when fastify would have routed it to the same proxy route and
// run nothing else on the way: it asks a router that holds every route fastify has (find-my-way,
// as fastify's, with the same options), and declines whatever it is not sure of (a body, an
// upgrade, a percent-encoding or `;`, TRUSTED_PROXIES, a closing server). fastify serves what it
// declines, exactly as before.
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type {
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  onRequestHookHandler,
  RouteOptions,
} from 'fastify'
import FindMyWay from 'find-my-way'
import { DoorReply, DoorRequest, type DoorRouteOptions, type ErrorAnswer } from './door-request.js'

/** What a proxy route gives the door: its one onRequest hook (the steps) and its handler. */
export interface DoorRoute {
  readonly checks: onRequestHookHandler
  readonly forward: (request: FastifyRequest, reply: FastifyReply) => void
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The front door, when open (not behind TRUSTED_PROXIES, nor with `tuning.frontDoor: false`). */
    frontDoor?: FrontDoor
  }
  interface FastifyContextConfig {
    /** Set on a proxy route the front door may serve (proxy/front-door.ts). */
    door?: DoorRoute
  }
}

/** The methods the door serves: those that carry no body when they declare none. */
const DOOR_METHODS = ['GET', 'HEAD', 'DELETE', 'OPTIONS'] as const
const isDoorMethod = (method: string | undefined): boolean =>
  method === 'GET' || method === 'HEAD' || method === 'DELETE' || method === 'OPTIONS'

/** An onRequest hook as the door calls it. */
type Hook = (request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void) => void

interface Stored {
  readonly route: DoorRoute | null
  readonly options: DoorRouteOptions | null
}

/** What the door needs of the app besides its routes. */
export interface FrontDoorOptions {
  /** fastify's onRequest hook of every route (http/guards.ts). */
  readonly guards: onRequestHookHandler
  readonly answerError: ErrorAnswer
  /** Metrics, request line, usage and request log, as the onResponse hook does (ops/request-accounting.ts). */
  readonly account: (request: FastifyRequest, reply: FastifyReply) => void
  readonly makeRequestId: (req: IncomingMessage) => string
  readonly draining: () => boolean
}

export class FrontDoor {
  /** Every route fastify has: a proxy route with its door, any other as null. */
  private readonly router
  private readonly urlsElsewhere = new Set<string>()
  /** False once a route could not be mirrored, or the server began to close: fastify serves all. */
  private open = true
  /** Requests served by the door (tgw_proxy_front_door_requests_total would read it). */
  served = 0

  constructor(routerOptions: { maxParamLength: number }) {
    this.router = FindMyWay({ ignoreTrailingSlash: false, maxParamLength: routerOptions.maxParamLength })
  }

  /** fastify's onRoute hook: the route as fastify's router has it. */
  mirror(route: RouteOptions): void {
    const url = route.url
    const door = route.config?.door
    try {
      if (door !== undefined) {
        const methods = (Array.isArray(route.method) ? route.method : [route.method]).filter(isDoorMethod)
        if (methods.length === 0) return
        const options: DoorRouteOptions = { url, method: String(route.method), config: { kind: 'proxy' } }
        this.router.on(methods as FindMyWay.HTTPMethod[], url, () => {}, { route: door, options } satisfies Stored)
        return
      }
      // Any other route takes its path from the door for every method it serves: declining is safe.
      if (this.urlsElsewhere.has(url)) return
      this.urlsElsewhere.add(url)
      this.router.on([...DOOR_METHODS], url, () => {}, { route: null, options: null } satisfies Stored)
    } catch {
      // Two routes the door cannot tell apart (find-my-way refuses the second): fastify serves everything.
      this.open = false
    }
  }

  /** From now on fastify serves every request (the server is closing). */
  close(): void {
    this.open = false
  }

  /** Puts the door in front of fastify's own 'request' listener. */
  install(server: Server, app: FastifyInstance, options: FrontDoorOptions): void {
    const [fastifyHandler] = server.listeners('request') as ((req: IncomingMessage, res: ServerResponse) => void)[]
    if (fastifyHandler === undefined) return
    server.removeListener('request', fastifyHandler)
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      if (!this.take(req, res, app, options)) fastifyHandler(req, res)
    })
  }

  /** Serves the request and returns true, or returns false for fastify to serve it. */
  private take(req: IncomingMessage, res: ServerResponse, app: FastifyInstance, options: FrontDoorOptions): boolean {
    if (!this.open || !isDoorMethod(req.method)) return false
    const headers = req.headers
    if (headers['content-length'] !== undefined || headers['transfer-encoding'] !== undefined) return false
    if (headers.upgrade !== undefined) return false
    const url = req.url!
    if (url.charCodeAt(0) !== 47 /* / */ || url.includes('%') || url.includes(';')) return false
    const found = this.router.find(req.method as FindMyWay.HTTPMethod, url)
    const stored = found?.store as Stored | undefined
    if (stored?.route == null) return false
    this.served++
    this.serve(stored.route, stored.options!, req, res, app, options)
    return true
  }

  private serve(
    route: DoorRoute,
    routeOptions: DoorRouteOptions,
    req: IncomingMessage,
    res: ServerResponse,
    app: FastifyInstance,
    options: FrontDoorOptions,
  ): void {
    const id = options.makeRequestId(req)
    const request = new DoorRequest(id, req, app, routeOptions)
    const reply = new DoorReply(res, request, options.answerError, options.draining)
    const asRequest = request as unknown as FastifyRequest
    const asReply = reply as unknown as FastifyReply
    // As fastify's onResponse: when the answer ends, or the response fails.
    const answered = () => {
      res.removeListener('finish', answered)
      res.removeListener('error', answered)
      reply.ended()
      try {
        options.account(asRequest, asReply)
      } catch (err) {
        request.log.error({ err }, 'request accounting failed')
      }
    }
    res.on('finish', answered)
    res.on('error', answered)
    const refuse = (error: Error) => {
      try {
        options.answerError(error as FastifyError, asRequest, asReply)
      } catch (err) {
        request.log.error({ err }, 'the error answer failed')
        if (!res.headersSent) res.writeHead(500).end()
      }
    }
    const afterChecks = (error?: Error) => {
      if (error !== undefined) return refuse(error)
      try {
        route.forward(asRequest, asReply)
      } catch (err) {
        refuse(err as Error)
      }
    }
    const afterGuards = (error?: Error) => {
      if (error !== undefined) return refuse(error)
      try {
        ;(route.checks as Hook)(asRequest, asReply, afterChecks)
      } catch (err) {
        refuse(err as Error)
      }
    }
    // A throw anywhere is a bug: answered 500 by the error handler, as fastify answers one.
    try {
      ;(options.guards as Hook)(asRequest, asReply, afterGuards)
    } catch (err) {
      refuse(err as Error)
    }
  }
}
