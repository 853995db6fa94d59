// The proxy's WebSockets on one replica (docs/internals.md, WebSockets): @fastify/http-proxy
// (`websocket: true`) routes the upgrade through the route's steps and answers the client's
// handshake; the connection it then makes is this one's: the upstream's socket the last step
// opened is adopted, joined to the client's in a SocketPair, registered, counted, checked again
// at once (its credential may have died while it opened), and ended by revocation (revocation.ts,
// sweep.ts) or shutdown.
import type { IncomingMessage } from 'node:http'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import type { WebSocket } from 'ws'
import type { EvictionListener } from '../../cache/entry-names.js'
import type { TenancyLookups } from '../../shared/tenancy-records.js'
import type { ProxyRoute } from '../route.js'
import { OpenSockets } from './open-sockets.js'
import { type CredentialSources, recheckOrWarn, revocationListener } from './revocation.js'
import { ENDINGS, SocketPair } from './socket-pair.js'
import { answeredProtocol } from './subprotocols.js'
import { CredentialSweep } from './sweep.js'
import { type Upgrade, upgradeOf } from './upgrade.js'
import { defaultMaxWebSocketsPerAccount } from './route-options.js'

export interface WebSocketRuntimeOptions {
  lookups: TenancyLookups
  log: FastifyBaseLogger
  /** Counts an answered upgrade as any request is counted once answered (ops/request-accounting.ts). */
  account(request: FastifyRequest, reply: FastifyReply): void
  /** The keyring (signing-keys/keyring.ts): whether a token's `kid` is still taken, and word of a new set of keys. */
  signingKeys: { accepts(kid: string): boolean; onChange(listener: () => void): void }
  /** MAX_CONNECTIONS: half of it is a route's `max_websockets_per_account` unless set. */
  maxConnections: number
}

/** What @fastify/http-proxy's WebSocket proxy calls once the client's handshake is answered. */
type HandleConnection = (client: WebSocket, request: FastifyRequest) => void

export class WebSocketRuntime {
  readonly sockets = new OpenSockets<SocketPair>()
  /** Told of the caches' evictions (the invalidation bus): the sockets they concern are checked. */
  readonly evicted: EvictionListener
  /** Sockets of one parent account on a route where `max_websockets_per_account` is not set. */
  readonly defaultMaxPerAccount: number
  private readonly sources: CredentialSources
  private readonly sweep: CredentialSweep

  private readonly options: WebSocketRuntimeOptions
  constructor(options: WebSocketRuntimeOptions) {
    this.options = options
    const { signingKeys } = options
    this.sources = { lookups: options.lookups, signingKeyAccepted: (kid) => signingKeys.accepts(kid) }
    this.evicted = revocationListener(this.sockets, this.sources, options.log)
    this.sweep = new CredentialSweep(this.sockets, this.sources, options.log)
    this.defaultMaxPerAccount = defaultMaxWebSocketsPerAccount(options.maxConnections)
    // A new set of signing keys (over the bus, or the reload timer) may have withdrawn a token's.
    signingKeys.onChange(() => this.sweep.closeWithdrawnTokens())
  }

  /** ws's choice of subprotocol for the client: the upstream's (websocket/subprotocols.ts). */
  readonly handleProtocols = (offered: Set<string>, raw: IncomingMessage): string | false =>
    answeredProtocol(offered, upgradeOf(raw)?.upstream?.protocol ?? '')

  /**
   * The upstream's socket is open: the client's handshake comes next (the route's handler). Until
   * the pair adopts it, a failed handshake or a departed client ends it and gives the place back.
   */
  awaitHandshake(reply: FastifyReply, route: ProxyRoute, upgrade: Upgrade): void {
    // http-proxy's WebSocketProxy is the route's (`reply.wsProxy`): its connection becomes ours.
    const proxy = (reply as unknown as { wsProxy?: { handleConnection: HandleConnection } }).wsProxy
    if (proxy !== undefined && proxy.handleConnection !== this.adopt) proxy.handleConnection = this.adopt
    upgrade.route = route
    reply.raw.once('close', () => {
      if (upgrade.adopted) return
      upgrade.upstream?.terminate()
      if (upgrade.place !== null) this.sockets.unreserve(route.prefix, upgrade.place)
    })
  }

  private readonly adopt: HandleConnection = (client, request) => {
    const upgrade = upgradeOf(request.raw)
    const route = upgrade?.route
    const upstream = upgrade?.upstream
    if (upgrade === undefined || route == null || upstream == null || upgrade.reply === null) {
      client.terminate()
      return
    }
    upgrade.adopted = true
    // The slot was the upgrade's, as any request's until its answer: the socket's life is not.
    request.exchange?.upgraded()
    upgrade.reply.code(101)
    this.options.account(request, upgrade.reply)
    // The upgrade's span stays open while the socket does: its close is an event on it.
    const trace = request.trace
    if (trace !== null) {
      const connection = request.raw.socket
      client.once('close', (code) => trace.closed(code, connection.bytesRead, connection.bytesWritten))
    }
    const principal = request.principal
    const place = upgrade.place
    const pair = new SocketPair(
      route.prefix,
      client,
      upstream,
      {
        keyId: principal?.key.id ?? null,
        keyTenantId: principal?.tenant.id ?? null,
        actingTenantId: request.actingTenant?.id ?? null,
        keyExpiresAt: principal?.key.expiresAt ?? null,
        tokenExpiresAt: principal?.accessToken?.expiresAtMs ?? null,
        tokenKid: principal?.accessToken?.kid ?? null,
        cell:
          route.cells === null || request.actingTenant === null
            ? null
            : { served: request.cell, defaultCell: route.cells.defaultCell, parentId: request.actingTenant.parentId },
      },
      route.websocket!,
      (closed) => {
        this.sockets.closed(closed)
        if (place !== null) this.sockets.unreserve(route.prefix, place)
      },
    )
    this.sockets.opened(pair)
    this.sweep.wake()
    upstream.resume()
    // The upstream left while the client's handshake was answered.
    if (upstream.readyState !== upstream.OPEN) {
      pair.end({ code: 1014, reason: 'upstream went away' })
      return
    }
    // The credential was checked when the upgrade began; it may have died while the upstream
    // answered, and the message saying so found no socket to close then.
    void recheckOrWarn(pair, this.sources, this.options.log, 'as it opened')
  }

  /**
   * Shutdown, after the drain period (main.ts): every socket closed with 1001. An end that has not
   * answered its close within `graceMs` is cut: the server's close waits for every socket, and ws
   * would wait 30 s for each, past SHUTDOWN_TIMEOUT_MS.
   */
  closeAll(graceMs = 2_000): void {
    this.sweep.stop()
    const open = [...this.sockets.all()]
    for (const pair of open) pair.end(ENDINGS.shutdown)
    if (open.length === 0) return
    setTimeout(() => {
      for (const pair of open) if (this.sockets.has(pair)) pair.terminate()
    }, graceMs).unref()
  }
}
