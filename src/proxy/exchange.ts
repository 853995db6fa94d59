// A proxied request from the moment it holds one of its route's upstream slots until its
// exchange is over on both sides (docs/api.md, "time and connections are bounded"): the slot is
// given back once the client's side has closed and the upstream's request is settled, a client
// that stops reading the answer is cut off, and a client that hangs up is logged and counted as
// what it is rather than as a failed upstream.
import type { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Tally } from '../ops/fast-metrics.js'
import type { RouteConcurrency, SlotHolder } from './concurrency.js'

export interface ClientAbortTallies {
  readonly hungUp: Tally
  readonly stoppedReading: Tally
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set once a proxied request holds an upstream slot. */
    exchange: Exchange | null
  }
}

export class Exchange {
  private stoppedReading = false
  private upstreamBody: Readable | null = null
  /** Sent upstream, and neither its response headers nor its failure has come back yet. */
  private upstreamPending = false
  private clientClosed = false
  private released = false
  private idleTimer: NodeJS.Timeout | null = null
  /** Bytes of the response the client's socket had handed to the kernel at the last idle check. */
  private flushedAtLastCheck = 0
  private readonly startedAt = performance.now()

  constructor(
    private readonly slots: RouteConcurrency,
    private readonly holder: SlotHolder | null,
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    private readonly clientAborts: ClientAbortTallies,
    /** How long a client may take nothing of a response that waits for it. */
    private readonly responseIdleMs: number,
  ) {
    // 'close' comes once, whether the answer was sent whole or the connection went first; a
    // request that waited for its slot may have lost its client already.
    if (reply.raw.closed) this.onClose()
    else reply.raw.once('close', this.onClose)
  }

  /** The client is gone: nothing can be answered any more. */
  clientGone(): boolean {
    return this.clientClosed || this.reply.raw.destroyed || this.request.raw.aborted
  }

  /** The request leaves for the upstream (reply-from's rewriteRequestHeaders). */
  sentUpstream(): void {
    this.upstreamPending = true
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

  /** The upstream's answer streams to the client: from now on, a client that takes nothing of it is cut off. */
  responding(body: Readable): void {
    this.upstreamBody = body
    this.flushedAtLastCheck = this.flushed()
    this.idleTimer = setTimeout(this.checkIdle, this.responseIdleMs)
  }

  /** Bytes of the response the client's socket has handed to the kernel (written, not just queued). */
  private flushed(): number {
    const socket = this.reply.raw.socket
    return socket === null ? 0 : socket.bytesWritten - socket.writableLength
  }

  /**
   * Every responseIdleMs: output waiting for the client and not a byte of it taken since the last
   * check means the client stopped reading. A slow but steady reader moves the count; a slow
   * upstream leaves nothing waiting, and is the route timeout's business. (Node's socket timeout
   * would do neither: it stays quiet once the whole answer is queued, and carries over to the next
   * request on a pipelined connection.)
   */
  private readonly checkIdle = (): void => {
    const res = this.reply.raw
    if (this.clientClosed) return
    const flushed = this.flushed()
    if (res.writableLength > 0 && flushed === this.flushedAtLastCheck) {
      this.stoppedReading = true
      res.destroy()
      return
    }
    this.flushedAtLastCheck = flushed
    this.idleTimer!.refresh()
  }

  private readonly onClose = (): void => {
    this.clientClosed = true
    if (this.idleTimer !== null) clearTimeout(this.idleTimer)
    if (!this.upstreamPending) this.release()
    // undici answers within the route's timeout (headers or failure); should a path ever miss
    // upstreamSettled, the slot still comes back.
    else setTimeout(() => this.release(), this.slots.maxWaitMs + 10_000).unref()
    if (this.reply.raw.writableFinished) return
    // The upstream broke off its answer: fastify logs that, and it is not the client's doing.
    if (this.upstreamBody?.errored) return
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

  private release(): void {
    if (this.released) return
    this.released = true
    this.slots.release(this.holder)
  }
}
