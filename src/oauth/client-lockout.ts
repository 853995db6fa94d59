// Failed client authentications, per (client id, client address) and per replica
// (docs/credentials.md): after FAILED_ATTEMPTS_LIMIT within a minute, the client id is answered 429
// from that address until the oldest of them is a minute old, without a look at the store. Per
// address, so that whoever knows a key id (it is in X-Service-Key-Id, audit events, a token's
// `sub`) cannot lock its owner out from elsewhere. Bounded: the least recently failed go first.
import { isIPv4, isIPv6 } from 'node:net'
import { LRUCache } from 'lru-cache'
import { OAuthError } from './errors.js'

export const FAILED_ATTEMPTS_LIMIT = 10
export const FAILED_ATTEMPTS_WINDOW_MS = 60_000
/** Client ids remembered at once: with ten instants each, well under a megabyte. */
const MAX_CLIENTS = 10_000
/** A client id is a key's id (36 characters); a longer one is remembered by its start. */
const MAX_ID_LENGTH = 64
const MAPPED_IPV4 = '::ffff:'

/**
 * The address a failure is counted against: an IPv4 address (also when it arrives IPv4-mapped on
 * a dual-stack socket), or the /64 of an IPv6 one, since one host commonly holds a whole /64 and
 * would otherwise get a fresh count per address.
 */
export function clientAddressKey(ip: string | undefined): string {
  if (ip === undefined) return '-'
  const lower = ip.toLowerCase()
  if (lower.startsWith(MAPPED_IPV4) && isIPv4(lower.slice(MAPPED_IPV4.length))) return lower.slice(MAPPED_IPV4.length)
  if (!isIPv6(lower)) return lower
  return `${ipv6Groups(lower).slice(0, 4).join(':')}::/64`
}

/** The eight 16-bit groups of a valid IPv6 address, without leading zeros (`::` expanded). */
function ipv6Groups(ip: string): string[] {
  const [head, tail] = ip.split('%')[0]!.split('::') as [string, string | undefined]
  const parts = (text: string | undefined) =>
    text === undefined || text === ''
      ? []
      : text.split(':').flatMap((part) => {
          if (!part.includes('.')) return [part]
          // An embedded IPv4 tail is two groups.
          const [a, b, c, d] = part.split('.').map(Number) as [number, number, number, number]
          return [((a << 8) | b).toString(16), ((c << 8) | d).toString(16)]
        })
  const front = parts(head)
  const back = parts(tail)
  const groups =
    tail === undefined ? front : [...front, ...Array<string>(8 - front.length - back.length).fill('0'), ...back]
  return groups.map((group) => Number.parseInt(group, 16).toString(16))
}

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

  private readonly now: () => number
  constructor(now: () => number = Date.now) {
    this.now = now
  }

  /**
   * One count per client id and address. Key ids are UUIDs, which the store reads in either case:
   * one count for every spelling.
   */
  private static slot(clientId: string, address: string | undefined): string {
    return `${clientId.slice(0, MAX_ID_LENGTH).toLowerCase()} ${clientAddressKey(address)}`
  }

  private recent(slot: string): number[] {
    const since = this.now() - FAILED_ATTEMPTS_WINDOW_MS
    return (this.failures.get(slot) ?? []).filter((at) => at > since)
  }

  /** Throws the 429 while `clientId` has failed too often from `address` in the last minute. */
  refuseIfLocked(clientId: string, address: string | undefined): void {
    this.refuseIfSlotLocked(FailedClientAttempts.slot(clientId, address))
  }

  private refuseIfSlotLocked(slot: string): void {
    const recent = this.recent(slot)
    if (recent.length < FAILED_ATTEMPTS_LIMIT) return
    const retryAfter = Math.max(1, Math.ceil((recent[0]! + FAILED_ATTEMPTS_WINDOW_MS - this.now()) / 1000))
    throw new OAuthError(
      429,
      'invalid_client',
      `too many failed authentications for this client from this address; retry in ${retryAfter} s`,
      { 'retry-after': String(retryAfter) },
    )
  }

  /**
   * Runs one authentication of `clientId` (its OAuthError is a failure, its result a success),
   * or throws the 429. Each attempt under way may yet fail, so no more start than the failures
   * left allow: the rest wait for one to end and look again. A burst sent at once thus gets no
   * more secrets checked than one sent in turn, and right secrets sent at once all pass.
   */
  async attempt<T>(clientId: string, address: string | undefined, authenticate: () => Promise<T>): Promise<T> {
    const slot = FailedClientAttempts.slot(clientId, address)
    for (;;) {
      this.refuseIfSlotLocked(slot)
      const running = this.underWay.get(slot)
      if (running === undefined || this.recent(slot).length + running.count < FAILED_ATTEMPTS_LIMIT) break
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
      this.failures.delete(slot)
      return result
    } catch (err) {
      if (err instanceof OAuthError) this.failedSlot(slot)
      throw err
    } finally {
      running.count--
      // As many as may start now wake (each a slot left by a success), or all once the id is
      // locked (each to be refused): not every waiter at every end, which costs the square.
      const failed = this.recent(slot).length
      const free =
        failed >= FAILED_ATTEMPTS_LIMIT ? running.waiting.length : FAILED_ATTEMPTS_LIMIT - failed - running.count
      for (const wake of running.waiting.splice(0, Math.max(0, free))) wake()
      if (running.count === 0 && running.waiting.length === 0) this.underWay.delete(slot)
    }
  }

  failed(clientId: string, address: string | undefined): void {
    this.failedSlot(FailedClientAttempts.slot(clientId, address))
  }

  private failedSlot(slot: string): void {
    const recent = this.recent(slot)
    recent.push(this.now())
    this.failures.set(slot, recent.slice(-FAILED_ATTEMPTS_LIMIT))
  }

  /** A success forgets the failures from its address: a client that fixed its secret starts afresh. */
  succeeded(clientId: string, address: string | undefined): void {
    this.failures.delete(FailedClientAttempts.slot(clientId, address))
  }
}
