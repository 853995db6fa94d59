// A WebSocket upgrade on its way through the proxy's steps (docs/api.md, WebSockets): what the
// client offered, the places it holds under `max_websockets_per_tenant` and
// `max_websockets_per_account`, and the upstream's socket, opened before the client's handshake
// is answered, so that the client gets the upstream's choice of subprotocol, and a refusal or an
// unreachable upstream as an ordinary HTTP answer.
import { asksForWebSocket } from '../../http/upgrade-request.js'
import type { IncomingMessage } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { WebSocket } from 'ws'
import { unauthenticated } from '../../auth/principal.js'
import { ApiError } from '../../errors.js'
import { upstreamHeaders } from '../headers.js'
import { ABANDONED, type Verdict } from '../pipeline.js'
import type { ProxyRoute } from '../route.js'
import type { SocketHolder } from './open-sockets.js'
import { offeredProtocols, type OfferedProtocols, subprotocolListProblem } from './subprotocols.js'

export interface Upgrade {
  readonly offered: OfferedProtocols
  /** The credential came as the `tgw.bearer.` subprotocol: never forwarded as Authorization. */
  readonly credentialFromProtocol: boolean
  /** The tenant and parent account whose places under the route's caps this upgrade holds; null: none taken. */
  place: SocketHolder | null
  /** The upstream's socket, open and paused until the client's handshake is answered. */
  upstream: WebSocket | null
  /** Taken over by a SocketPair: from then on, the pair ends both sockets. */
  adopted: boolean
  reply: FastifyReply | null
  /** The route, once the upstream's socket is open. */
  route: ProxyRoute | null
}

/** By the raw request: ws's handleProtocols sees only that. Upgrades only: a plain request costs nothing. */
const upgrades = new WeakMap<IncomingMessage, Upgrade>()

export function upgradeOf(raw: IncomingMessage): Upgrade | undefined {
  return upgrades.get(raw)
}

const WEBSOCKET_KEY = /^[+/0-9A-Za-z]{21}[AQgw]==$/

/**
 * RFC 6455 §4.2.1: what makes an upgrade a WebSocket opening handshake; the refusal otherwise. Each
 * check is at least as strict as ws's own (websocket-server.js, handleUpgrade), which answers the
 * client after the upstream's socket is open: nothing ws would refuse gets that far.
 */
export function handshakeProblem(request: FastifyRequest): ApiError | undefined {
  const headers = request.headers
  if (!asksForWebSocket(headers.upgrade))
    return new ApiError('bad_request', 'the gateway upgrades connections only to WebSocket (Upgrade: websocket)')
  // ws answers the client's handshake and takes `websocket` alone, once the upstream's socket is
  // open: a list naming it too is refused here, before a place is taken or the upstream dialled.
  if (headers.upgrade!.trim().toLowerCase() !== 'websocket')
    return new ApiError('bad_request', 'send Upgrade: websocket alone, not a list of protocols')
  if (request.method !== 'GET') return new ApiError('bad_request', 'a WebSocket upgrade must be a GET')
  if (headers['sec-websocket-version'] !== '13')
    return new ApiError('bad_request', 'Sec-WebSocket-Version must be 13', {
      headers: { 'sec-websocket-version': '13' },
    })
  const key = headers['sec-websocket-key']
  if (typeof key !== 'string' || !WEBSOCKET_KEY.test(key.trim()))
    return new ApiError('bad_request', 'Sec-WebSocket-Key must be 16 bytes in base64')
  const protocols = subprotocolListProblem(headers['sec-websocket-protocol'])
  if (protocols !== null) return new ApiError('bad_request', protocols)
  return undefined
}

/**
 * Reads the upgrade's subprotocols and, when there is no Authorization, takes the `tgw.bearer.`
 * credential as the request's: the tenancy check that follows reads it like any Bearer value.
 */
export function beginUpgrade(request: FastifyRequest): ApiError | undefined {
  const offered = offeredProtocols(request.headers['sec-websocket-protocol'])
  if (offered.bearerEntries > 1) return unauthenticated('offer one tgw.bearer.<credential> subprotocol, not several')
  const credentialFromProtocol = offered.credential !== null && request.headers.authorization === undefined
  if (credentialFromProtocol) request.headers.authorization = `Bearer ${offered.credential}`
  upgrades.set(request.raw, {
    offered,
    credentialFromProtocol,
    place: null,
    upstream: null,
    adopted: false,
    reply: null,
    route: null,
  })
  return undefined
}

/**
 * Where the upstream's socket is: the route's upstream (or the target `upstream` the balancer
 * picked) as ws(s), its base path, then the request's path and query.
 */
export function upstreamSocketUrl(route: ProxyRoute, url: string, upstream = route.upstream): string {
  // A route with `websocket` has an upstream (route-table.ts refuses one without).
  if (upstream === null) throw new Error(`route ${route.prefix} has no upstream`)
  return `ws${upstream.slice(4)}${url}`
}

/** The headers of the upstream's upgrade: the same policy as any request (headers.ts), less the handshake's own. */
export function upgradeHeaders(
  request: FastifyRequest,
  route: ProxyRoute,
  upgrade: Upgrade,
  identity: Parameters<typeof upstreamHeaders>[1]['identity'],
): Record<string, string | string[] | number | undefined> {
  const headers = upstreamHeaders(request.headers, {
    identity,
    requestId: request.id,
    forwardAuthorization: route.forwardAuthorization && !upgrade.credentialFromProtocol,
    peerAddress: request.socket.remoteAddress,
    proto: request.protocol === 'https' ? 'https' : 'http',
    host: request.headers.host,
    connection: request.raw.headers.connection,
    passHeaders: route.passHeaders,
    cell: request.cell,
  })
  // ws writes the handshake's own (key, version, protocols) and the upstream's Host.
  for (const name of Object.keys(headers)) {
    if (name.startsWith('sec-websocket-') || name === 'host') delete headers[name]
  }
  return headers
}

function dialFailure(err: Error): ApiError {
  return /timed out/i.test(err.message)
    ? new ApiError('upstream_timeout', 'the upstream did not answer the WebSocket upgrade in time')
    : new ApiError('upstream_unavailable', 'the upstream could not be reached')
}

/**
 * Opens the upstream's socket: undefined once it is open (paused, so that nothing it sends is lost
 * before the client's handshake is answered), the refusal when it cannot be, ABANDONED when the
 * client leaves meanwhile.
 */
export function dialUpstream(
  request: FastifyRequest,
  reply: FastifyReply,
  route: ProxyRoute,
  upgrade: Upgrade,
  headers: Record<string, string | string[] | number | undefined>,
  target = route.upstream,
): Promise<Verdict> {
  const options = route.websocket!
  const upstream = new WebSocket(upstreamSocketUrl(route, request.url, target), [...upgrade.offered.application], {
    headers,
    maxPayload: options.maxMessageBytes,
    perMessageDeflate: false,
    autoPong: false,
    handshakeTimeout: route.timeoutMs,
    followRedirects: false,
  })
  // Its errors are the dial's (below) or the pair's (socket-pair.ts): never an uncaught 'error'.
  upstream.on('error', () => {})
  return new Promise<Verdict>((resolve) => {
    let settled = false
    const settle = (verdict: Verdict) => {
      if (settled) return
      settled = true
      reply.raw.off('close', leave)
      resolve(verdict)
    }
    const leave = () => {
      upstream.terminate()
      settle(ABANDONED)
    }
    upstream.once('open', () => {
      upstream.pause()
      upgrade.upstream = upstream
      upgrade.reply = reply
      request.upstreamSentAt = performance.now()
      settle(undefined)
    })
    upstream.once('unexpected-response', (req, res) => {
      res.resume()
      req.destroy()
      settle(
        new ApiError(
          'upstream_unavailable',
          `the upstream answered the WebSocket upgrade with ${res.statusCode ?? 'nothing'}, not 101`,
        ),
      )
    })
    upstream.once('error', (err) => settle(dialFailure(err)))
    upstream.once('close', () => settle(new ApiError('upstream_unavailable', 'the upstream could not be reached')))
    reply.raw.once('close', leave)
  })
}
