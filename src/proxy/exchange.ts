// A proxied request from the moment it holds one of its route's upstream slots until its
// exchange with the client is over (docs/api.md, "time and connections are bounded"): the slot is
// given back however it ends, a client that stops reading the answer is cut off, and a client
// that hangs up is logged and counted as what it is rather than as a failed upstream.
import type { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Tally } from '../ops/fast-metrics.js'
import type { RouteConcurrency } from './concurrency.js'

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
  private readonly startedAt = performance.now()

  constructor(
    private readonly slots: RouteConcurrency,
    private readonly tenantId: string | null,
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    private readonly clientAborts: ClientAbortTallies,
  ) {
    // 'close' comes once, whether the answer was sent whole or the connection went first; a
    // request that waited for its slot may have lost its client already (then the slot goes on).
    if (reply.raw.closed) this.onClose()
    else reply.raw.once('close', this.onClose)
  }

  /**
   * The upstream's answer has begun. From now on a client that takes nothing of it for `idleMs`
   * is cut off. Node's socket timeout fires only when nothing was read or written for that long
   * (a slow but steady reader keeps it off), and the check of a pending drain leaves a slow
   * upstream to the route's own timeout.
   */
  responding(body: Readable, idleMs: number): void {
    this.upstreamBody = body
    this.reply.raw.setTimeout(idleMs, this.onIdle)
  }

  /** The client is gone: nothing can be answered any more. */
  clientGone(): boolean {
    return this.reply.raw.destroyed || this.request.raw.aborted
  }

  private readonly onIdle = (): void => {
    const res = this.reply.raw
    if (!res.writableNeedDrain) return
    this.stoppedReading = true
    res.destroy()
  }

  private readonly onClose = (): void => {
    this.slots.release(this.tenantId)
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
}
