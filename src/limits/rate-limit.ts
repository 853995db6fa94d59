// A rate limit as one replica holds it (leased-limit.ts): units are tokens of the shared bucket;
// the local state is a bucket of its own (bucket.ts), seeded from what Redis last said.
import { type BucketState, charge, fullBucket, giveBack, msUntil, type Rate, refill, take, tokensAt } from './bucket.js'
import { LeasedLimit } from './leased-limit.js'
import type { LeaseCall, LimitContext } from './lease-terms.js'
import type { PolicyName, PolicyState } from './types.js'

export class RateLimit extends LeasedLimit {
  /** The shared bucket's tokens after the last answer, and when it was given. */
  private lastKnown: BucketState | null = null
  /** The shared bucket's copy the last answer came from (scripts.ts): '' before any. */
  private epoch = ''
  private local: BucketState
  /**
   * Local mode: the local bucket as it would be had this replica admitted nothing on its own.
   * What the local one lacks of it is what this replica admitted lately, as the bucket still feels
   * it (refills forgive older units): the debt charged to a rebuilt shared bucket (`owed`).
   */
  private untouched: BucketState

  public rate: Rate
  private readonly key: string
  constructor(name: PolicyName, ctx: LimitContext, now: number, rate: Rate, key: string, meter = 'requests') {
    super(name, ctx, now, meter)
    this.rate = rate
    this.key = key
    this.local = fullBucket(rate, now)
    this.untouched = this.local
    // Embedded: one process, so its own bucket is the whole truth.
    if (ctx.store === null) this.mode = 'local'
  }

  protected cap(): number {
    return Math.max(1, Math.ceil(this.rate.requests / 10))
  }

  protected capacity(): number {
    return this.rate.requests
  }

  protected async call(now: number, { keep, returned, wanted, debt }: LeaseCall): Promise<void> {
    const store = this.ctx.store!
    const target = Math.max(1, wanted)
    const extra = this.mode === 'local' ? this.owed(now) : 0
    const answer = await store.rate({
      key: this.key,
      requests: this.rate.requests,
      perMs: this.rate.perSeconds * 1000,
      keep,
      returned,
      wanted,
      // What passed while this replica was on its own, charged only to a bucket rebuilt meanwhile
      // (Redis restarted empty): without it a rebuilt bucket starts full and the outage's
      // admissions pass twice (docs/internals.md, limits).
      extra,
      epoch: this.epoch,
      seen: this.lastKnown === null ? -1 : refill(this.lastKnown, this.rate, now).tokens,
      batch: Math.max(1, Math.ceil(target / 2)),
      debt,
    })
    const answeredAt = this.ctx.now()
    this.lastKnown = { tokens: Math.max(0, answer.tokens), at: answeredAt }
    this.epoch = answer.epoch
    this.granted(now, answeredAt, answer, store.ttlMs)
  }

  protected enterLocal(now: number): boolean {
    // Each replica on its own, from the shared bucket it last saw plus the lease it holds.
    const seen = this.lastKnown === null ? fullBucket(this.rate, now) : refill(this.lastKnown, this.rate, now)
    this.local = { tokens: Math.min(this.rate.requests, seen.tokens + this.held(now)), at: now }
    this.untouched = this.local
    return true
  }

  /** Local mode: the units this replica admitted on its own that the local bucket still lacks. */
  private owed(now: number): number {
    const lacking = refill(this.untouched, this.rate, now).tokens - refill(this.local, this.rate, now).tokens
    return Math.max(0, Math.ceil(lacking - 1e-9))
  }

  protected localAllows(now: number, units: number): boolean {
    return tokensAt(this.local, this.rate, now) >= units
  }

  protected localTake(now: number, units: number): void {
    this.local = take(this.local, this.rate, now, units).state
  }

  protected localGiveBack(now: number, units: number): void {
    this.local = giveBack(this.local, this.rate, now, units)
  }

  /** A local bucket below full: forgotten, it would come back full and let pass what it still owes. */
  override holdsState(now: number): boolean {
    return super.holdsState(now) || (this.mode === 'local' && tokensAt(this.local, this.rate, now) < this.rate.requests)
  }

  protected localCharge(now: number, units: number): void {
    this.local = charge(this.local, this.rate, now, units)
  }

  /** Tokens this replica believes are left: its lease plus the shared bucket as last seen. */
  private remaining(now: number): number {
    if (this.mode === 'local') return Math.floor(tokensAt(this.local, this.rate, now))
    const shared = this.lastKnown === null ? 0 : Math.floor(this.lastKnown.tokens)
    return Math.min(this.rate.requests, shared + this.held(now))
  }

  state(now: number): PolicyState {
    const remaining = this.remaining(now)
    const missing = this.rate.requests - remaining
    return {
      name: this.name,
      quota: this.rate.requests,
      windowSeconds: this.rate.perSeconds,
      remaining,
      resetSeconds: Math.ceil((missing * this.rate.perSeconds) / this.rate.requests),
    }
  }

  /** A bucket refills: a renewal gone to the requests ahead says it is spent for now (leased-limit.ts). */
  override refillsInTime(): boolean {
    return true
  }

  retryAfterMs(now: number, units: number): number {
    // A request that costs more than the bucket holds never passes: told to wait a whole window.
    if (units > this.rate.requests) return this.rate.perSeconds * 1000
    if (this.mode === 'local') return msUntil(this.local, this.rate, now, units)
    return Math.max(0, this.waitUntil - now)
  }
}
