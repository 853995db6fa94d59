// Failed client authentications, per client id and per replica (docs/credentials.md): after
// FAILED_ATTEMPTS_LIMIT within a minute, the client id is answered 429 until the oldest of them
// is a minute old, without a look at the store. Bounded: the least recently failed ids go first.
import { LRUCache } from 'lru-cache'
import { OAuthError } from './oauth-errors.js'

export const FAILED_ATTEMPTS_LIMIT = 10
export const FAILED_ATTEMPTS_WINDOW_MS = 60_000
/** Client ids remembered at once: with ten instants each, well under a megabyte. */
const MAX_CLIENTS = 10_000
/** A client id is a key's id (36 characters); a longer one is remembered by its start. */
const MAX_ID_LENGTH = 64

/** The authentications of one id under way, and the requests waiting for one of them to end. */
interface UnderWay {
  count: number
  waiting: (() => void)[]
}

export class FailedClientAttempts {
  /** Each id's failures in the last window, oldest first, at most FAILED_ATTEMPTS_LIMIT. */
  private readonly failures = new LRUCache<string, number[]>({
    max: MAX_CLIENTS,
    ttl: FAILED_ATTEMPTS_WINDOW_MS,
  })
  /** Bounded by the requests in flight: an entry goes when its last attempt ends. */
  private readonly underWay = new Map<string, UnderWay>()

  constructor(private readonly now: () => number = Date.now) {}

  /** Key ids are UUIDs, which the store reads in either case: one count for every spelling. */
  private static slot(clientId: string): string {
    return clientId.slice(0, MAX_ID_LENGTH).toLowerCase()
  }

  private recent(clientId: string): number[] {
    const since = this.now() - FAILED_ATTEMPTS_WINDOW_MS
    return (this.failures.get(FailedClientAttempts.slot(clientId)) ?? []).filter((at) => at > since)
  }

  /** Throws the 429 while `clientId` has failed too often in the last minute. */
  refuseIfLocked(clientId: string): void {
    const recent = this.recent(clientId)
    if (recent.length < FAILED_ATTEMPTS_LIMIT) return
    const retryAfter = Math.max(1, Math.ceil((recent[0]! + FAILED_ATTEMPTS_WINDOW_MS - this.now()) / 1000))
    throw new OAuthError(
      429,
      'invalid_client',
      `too many failed authentications for this client; retry in ${retryAfter} s`,
      { 'retry-after': String(retryAfter) },
    )
  }

  /**
   * Runs one authentication of `clientId` (its OAuthError is a failure, its result a success),
   * or throws the 429. Each attempt under way may yet fail, so no more start than the failures
   * left allow: the rest wait for one to end and look again. A burst sent at once thus gets no
   * more secrets checked than one sent in turn, and right secrets sent at once all pass.
   */
  async attempt<T>(clientId: string, authenticate: () => Promise<T>): Promise<T> {
    const slot = FailedClientAttempts.slot(clientId)
    for (;;) {
      this.refuseIfLocked(clientId)
      const running = this.underWay.get(slot)
      if (running === undefined || this.recent(clientId).length + running.count < FAILED_ATTEMPTS_LIMIT) break
      await new Promise<void>((resolve) => running.waiting.push(resolve))
    }
    let running = this.underWay.get(slot)
    if (running === undefined) {
      running = { count: 0, waiting: [] }
      this.underWay.set(slot, running)
    }
    running.count++
    try {
      const result = await authenticate()
      this.succeeded(clientId)
      return result
    } catch (err) {
      if (err instanceof OAuthError) this.failed(clientId)
      throw err
    } finally {
      running.count--
      // As many as may start now wake (each a slot left by a success), or all once the id is
      // locked (each to be refused): not every waiter at every end, which costs the square.
      const failed = this.recent(clientId).length
      const free =
        failed >= FAILED_ATTEMPTS_LIMIT ? running.waiting.length : FAILED_ATTEMPTS_LIMIT - failed - running.count
      for (const wake of running.waiting.splice(0, Math.max(0, free))) wake()
      if (running.count === 0 && running.waiting.length === 0) this.underWay.delete(slot)
    }
  }

  failed(clientId: string): void {
    const recent = this.recent(clientId)
    recent.push(this.now())
    this.failures.set(FailedClientAttempts.slot(clientId), recent.slice(-FAILED_ATTEMPTS_LIMIT))
  }

  /** A success forgets the id's failures: a client that fixed its secret starts afresh. */
  succeeded(clientId: string): void {
    this.failures.delete(FailedClientAttempts.slot(clientId))
  }
}
