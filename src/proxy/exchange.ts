// A proxied request from the moment it holds one of its route's upstream slots until its
// exchange is over on both sides (docs/api.md, "Time and connections"): the slot is
// given back once the client's side has closed and the upstream's request is settled, a client
// that stops reading the answer is cut off, and a client that hangs up is logged and counted as
// what it is rather than as a failed upstream. Nothing the exchange started outlives it: when its
// client's side closes (the answer sent whole, or the client gone), the request body still coming
// is ended, its idle timer with it, and an upstream request still under way is aborted.
//
// On the proxy's hot path: an exchange allocates no timer of its own while it runs (one backstop
// only when its client leaves before the upstream answers). The route's ResponseWatch looks at
// every answer in flight on one timer.
import type { Duplex } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { RequestOutcome } from '../request-log/capture.js'
import type { Tally } from '../shared/fast-metrics.js'
import type { RouteConcurrency, SlotHolder } from './concurrency.js'
import type { ResponseWatch, WatchedAnswer } from './response-watch.js'

export interface ClientAbortTallies {
  readonly hungUp: Tally
  readonly stoppedReading: Tally
}

/**
 * Counts an exchange for usage, limits, the metrics and the request log (ops/request-accounting.ts,
 * the app's `accountRequest`): fastify's onResponse does it for an answer that ended whole, the
 * exchange for one that did not (fastify never calls onResponse for it).
 */
export type AccountExchange = (request: FastifyRequest, reply: FastifyReply) => void

/**
 * The status a forwarded request is counted with when its client left before any answer began:
 * nginx's 499, "client closed request" (counted with the 4xx, the client's doing).
 */
export const CLIENT_CLOSED_REQUEST = 499

declare module 'fastify' {
  interface FastifyRequest {
    /** Set once a proxied request holds an upstream slot. */
    exchange: Exchange | null
  }
}

/** The upstream's side of an exchange, as the exchange needs it (upstream-call.ts is one). */
export interface UpstreamSide {
  /** True once the upstream broke off its answer. */
  readonly broken: boolean
  /** True once the request went out on an upstream connection (it may have been served). */
  readonly sent: boolean
  /** The client left: the call aborts what is still under way. */
  clientLeft(): void
}

export class Exchange implements WatchedAnswer {
  private stoppedReading = false
  /** The upstream's side, from the moment the request leaves for it. */
  private call: UpstreamSide | null = null
  /** The request body on its way upstream (proxy/request-body.ts); null without one. */
  private body: Duplex | null = null
  /** The upstream's answer began (its head went to the client). */
  private answering = false
  /** The answer's Content-Length; null when it has none, so that only counting it tells its size. */
  private declaredBytes: number | null = null
  /** The bytes of the answer's body passed on to the client so far. */
  private passedBytes = 0
  /** Counted (accountRequest): once, whichever of its ends came first. */
  accounted = false
  /** The bytes of a chunked request body passed on so far (proxy/request-body.ts counts them). */
  chunkedBodyBytes = 0
  /** Sent upstream, and neither its response headers nor its failure has come back yet. */
  private upstreamPending = false
  private clientClosed = false
  /** A WebSocket's upgrade was answered: its answer is whole, though the response never finishes. */
  private upgradeAnswered = false
  private released = false
  /** Gives the slot back should the upstream's request never settle (clientClosedNow). */
  private releaseLater: NodeJS.Timeout | null = null
  /** Its place in the route's ResponseWatch; -1 when not watched. */
  watchIndex = -1
  /** The units the upstream reported by meter (proxy/meter-reports.ts); null when none did. */
  reported: Map<string, number> | null = null
  /** When the client's progress was last seen, and how many bytes it had taken then. */
  private progressAt = 0
  private flushedAtProgress = 0
  private readonly startedAt = performance.now()

  private readonly slots: RouteConcurrency
  private readonly holder: SlotHolder | null
  private readonly request: FastifyRequest
  private readonly reply: FastifyReply
  private readonly clientAborts: ClientAbortTallies
  /** Cuts off a client that takes nothing of a response that waits for it. */
  private readonly watch: ResponseWatch
  private readonly account: AccountExchange
  /** The request units it counts for once forwarded: its route's cost. */
  readonly cost: number
  constructor(
    slots: RouteConcurrency,
    holder: SlotHolder | null,
    request: FastifyRequest,
    reply: FastifyReply,
    clientAborts: ClientAbortTallies,
    watch: ResponseWatch,
    account: AccountExchange,
    cost = 1,
  ) {
    this.cost = cost
    this.account = account
    this.slots = slots
    this.holder = holder
    this.request = request
    this.reply = reply
    this.clientAborts = clientAborts
    this.watch = watch
    // 'close' comes once, whether the answer was sent whole or the connection went first; a
    // request that waited for its slot may have lost its client already.
    // A closure rather than a property on the response: a property added to node's response
    // objects gives every one of its inline caches a second shape to tell apart.
    if (reply.raw.closed) this.clientClosedNow()
    else reply.raw.on('close', () => this.clientClosedNow())
  }

  /** The client is gone: nothing can be answered any more. */
  clientGone(): boolean {
    return this.clientClosed || this.reply.raw.destroyed || this.request.raw.aborted
  }

  /** The request leaves for the upstream (upstream-call.ts). */
  sentUpstream(call: UpstreamSide): void {
    this.call = call
    this.upstreamPending = true
  }

  /** The request's body, as the upstream will read it: ended with the exchange, even one already over. */
  carries(body: Duplex): void {
    this.body = body
    if (this.clientClosed) body.destroy()
  }

  /**
   * The upstream's response headers, or its failure, came back. Until then undici holds the
   * upstream connection even if the client left, so the slot is held too: otherwise requests
   * let in behind a departed client would queue inside undici, past the route's bound.
   */
  upstreamSettled(): void {
    this.upstreamPending = false
    if (this.clientClosed) this.release()
  }

  /**
   * The upstream's answer streams to the client: from now on, a client that takes nothing of it is
   * cut off, and one that leaves ends the upstream's side. `declaredBytes`: its Content-Length.
   */
  responding(declaredBytes: number | null): void {
    this.answering = true
    this.declaredBytes = declaredBytes
    if (this.clientClosed) return
    this.progressAt = performance.now()
    this.flushedAtProgress = this.flushed()
    this.watch.add(this)
  }

  /**
   * A WebSocket's upgrade was answered (proxy/websocket/): like any request, it held its slot until
   * its answer; the socket's life is the WebSocket limits' business, and its end no client abort.
   */
  upgraded(): void {
    // Over as an exchange: the socket's 'close', much later, finds it closed and counts nothing.
    this.clientClosed = true
    this.upgradeAnswered = true
    this.release()
  }

  /** A piece of the answer's body went to the client. */
  answered(bytes: number): void {
    // A chunked answer's length, or a cut one's, is known only by counting it (response_bytes).
    this.passedBytes += bytes
  }

  /**
   * The bytes of the upstream's answer: its Content-Length once it ended whole (a HEAD's too), else
   * what passed on to the client; null before it came.
   */
  answerBytes(): number | null {
    if (!this.answering) return null
    return this.declaredBytes !== null && this.reply.raw.writableFinished ? this.declaredBytes : this.passedBytes
  }

  /**
   * How the exchange ended, for the request log: whole, or cut short by the upstream or by the
   * client (which left, reset, or stopped reading and was cut off).
   */
  outcome(): RequestOutcome {
    if (this.reply.raw.writableFinished || this.upgradeAnswered) return 'completed'
    return this.call?.broken === true ? 'upstream_aborted' : 'client_aborted'
  }

  /** Bytes of the response the client's socket has handed to the kernel (written, not just queued). */
  private flushed(): number {
    const socket = this.reply.raw.socket
    return socket === null ? 0 : socket.bytesWritten - socket.writableLength
  }

  /**
   * Whether the client has taken nothing of output waiting for it for `idleMs` by `now`. A check
   * that finds progress, or nothing waiting, starts the count again.
   */
  stalledSince(now: number, idleMs: number): boolean {
    if (now - this.progressAt < idleMs) return false
    // An answer queued behind an earlier one on its connection (HTTP/1.1 pipelining) has no socket
    // yet: its bytes wait for the earlier answer, not for this client to read. Its count starts
    // when it has one.
    if (this.reply.raw.socket === null) {
      this.progressAt = now
      return false
    }
    const flushed = this.flushed()
    if (this.reply.raw.writableLength > 0 && flushed === this.flushedAtProgress) return true
    this.progressAt = now
    this.flushedAtProgress = flushed
    return false
  }

  /** The client stopped reading (ResponseWatch): its connection is cut. */
  cutOff(): void {
    this.stoppedReading = true
    this.reply.raw.destroy()
  }

  /** The client's side closed: the answer was sent whole, or the connection went first. */
  clientClosedNow(): void {
    if (this.clientClosed) return
    this.clientClosed = true
    this.watch.delete(this)
    // A body the upstream did not read whole (it failed, answered early, or the client left): its
    // idle timer would otherwise run on, and its end come to nobody.
    const body = this.body
    if (body !== null && !body.destroyed) body.destroy()
    if (!this.upstreamPending) this.release()
    // undici settles at once once aborted (below), else within the route's timeout; should a path
    // ever miss upstreamSettled, the slot still comes back.
    else this.releaseLater = setTimeout(() => this.release(), this.slots.maxWaitMs + 10_000).unref()
    if (this.reply.raw.writableFinished) return
    const call = this.call
    call?.clientLeft()
    if (call?.sent === true) this.countCutShort()
    // The upstream broke off its answer: upstream-call.ts logs that, and it is not the client's doing.
    if (call?.broken) return
    const tally = this.stoppedReading ? this.clientAborts.stoppedReading : this.clientAborts.hungUp
    tally.inc()
    this.request.log.info(
      {
        method: this.request.method,
        path: this.request.url.split('?', 1)[0]!.slice(0, 200),
        resolvedTenant: this.request.actingTenant?.id ?? null,
        ms: Math.round((performance.now() - this.startedAt) * 100) / 100,
        reason: this.stoppedReading ? 'stopped_reading' : 'hung_up',
      },
      'client abort',
    )
  }

  /**
   * A forwarded request whose answer did not end whole: counted all the same, as what was served
   * (fastify's onResponse comes only for an answer that ended whole). Its status is the upstream's,
   * or CLIENT_CLOSED_REQUEST when its client left before any answer began.
   */
  private countCutShort(): void {
    const response = this.reply.raw
    if (!response.headersSent) response.statusCode = CLIENT_CLOSED_REQUEST
    // Never a throw here: it runs in the response's 'close' listener.
    try {
      this.account(this.request, this.reply)
    } catch (err) {
      this.request.log.error({ err }, 'an answer cut short was not counted')
    }
  }

  private release(): void {
    if (this.released) return
    this.released = true
    if (this.releaseLater !== null) clearTimeout(this.releaseLater)
    this.slots.release(this.holder)
  }
}
