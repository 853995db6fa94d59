// The answers of one route that stream to their clients, watched on one timer for a client that
// stopped reading (docs/api.md, "Time and connections"); each is an Exchange (exchange.ts).

/** An answer the watch looks at: exchange.ts's Exchange. */
export interface WatchedAnswer {
  /** Its place in the watch; -1 when not watched. */
  watchIndex: number
  /** Whether its client has taken nothing of output waiting for it for `idleMs` by `now`. */
  stalledSince(now: number, idleMs: number): boolean
  /** Its client stopped reading: its connection is cut. */
  cutOff(): void
}

/**
 * The answers of one route that stream to their clients, looked at together: every quarter of
 * `idleMs`, an answer whose client has taken nothing of it for `idleMs`, with output waiting, is
 * cut off (so after between one and one and a quarter times `idleMs`). A slow but steady reader
 * moves the count; a slow upstream leaves nothing waiting, and is the route timeout's business.
 * (Node's socket timeout would do neither: it stays quiet once the whole answer is queued, and
 * carries over to the next request on a pipelined connection.) One timer for all, running only
 * while there are answers to watch.
 */
export class ResponseWatch {
  /** The answers watched, each knowing its place (no hashing per request, as a Set would). */
  private readonly watched: WatchedAnswer[] = []
  private timer: NodeJS.Timeout | null = null
  /** Sweeps in a row that found nothing: the timer stops after two. */
  private emptySweeps = 0

  readonly idleMs: number
  constructor(idleMs: number) {
    this.idleMs = idleMs
  }

  add(exchange: WatchedAnswer): void {
    exchange.watchIndex = this.watched.length
    this.watched.push(exchange)
    this.emptySweeps = 0
    if (this.timer === null) {
      this.timer = setInterval(() => this.sweep(), Math.max(1, Math.ceil(this.idleMs / 4)))
      this.timer.unref()
    }
  }

  delete(exchange: WatchedAnswer): void {
    const index = exchange.watchIndex
    if (index === -1) return
    exchange.watchIndex = -1
    const last = this.watched.pop()!
    if (last !== exchange) {
      this.watched[index] = last
      last.watchIndex = index
    }
  }

  private sweep(): void {
    if (this.watched.length === 0) {
      if (++this.emptySweeps >= 2) {
        clearInterval(this.timer!)
        this.timer = null
      }
      return
    }
    const now = performance.now()
    // Backwards: a removal moves only an exchange already looked at.
    for (let i = this.watched.length - 1; i >= 0; i--) {
      const exchange = this.watched[i]!
      if (exchange.stalledSince(now, this.idleMs)) {
        this.delete(exchange)
        exchange.cutOff()
      }
    }
  }
}
