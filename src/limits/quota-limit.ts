// A monthly quota as one replica holds it (leased-limit.ts): units are requests of the current
// UTC month (quota-month.ts); Redis counts every unit granted, and rebuilds a lost month from
// Postgres (quota-reports.ts). The local state is a count of the month's use, seeded from Redis or,
// failing that, from Postgres; this file says what a quota's M, balance and retry are.
import { monthSeconds, secondsToNextMonth } from './month.js'
import { QuotaReports } from './quota-reports.js'
import type { PolicyState, QuotaUse } from './types.js'

export class QuotaLimit extends QuotaReports {
  private localUsed = 0
  /** Its own shares for usage.threshold_reached (%); null: the defaults. Set by the limiter. */
  alertThresholds: readonly number[] | null = null

  protected cap(): number {
    return Math.max(1, Math.ceil(this.requests / 100))
  }

  protected capacity(): number {
    return this.requests
  }

  protected enterLocal(now: number): boolean {
    if (this.lastKnownUsed === null) {
      this.load(now)
      return false
    }
    // Redis counted this replica's lease as used; what is left of it is this replica's to spend.
    this.localUsed = Math.max(0, this.lastKnownUsed - this.held(now))
    return true
  }

  /**
   * The month counts every unit granted as used until it is given back: a lease that ran out
   * unspent goes back with the next call, or a stall past a lease's life would take it from the
   * month for good (a limit's first lease is M/100: 1 % of a credit at each stall).
   */
  protected override lapsed(units: number): void {
    this.refunds += units
  }

  protected localAllows(_now: number, units: number): boolean {
    return this.localUsed + units <= this.requests
  }

  protected localTake(_now: number, units: number): void {
    this.localUsed += units
  }

  protected localGiveBack(_now: number, units: number): void {
    this.localUsed = Math.max(0, this.localUsed - units)
  }

  protected localCharge(_now: number, units: number): void {
    this.localUsed += units
  }

  private remaining(now: number): number {
    if (this.mode === 'local') return Math.max(0, this.requests - this.localUsed)
    if (this.lastKnownUsed === null) return 0
    return Math.max(0, Math.min(this.requests, this.requests - this.lastKnownUsed + this.held(now)))
  }

  /** Whether the month has not `units` left as far as this replica knows (then Retry-After is the next month). */
  private exhausted(now: number, units: number): boolean {
    return this.lastKnownUsed !== null && this.remaining(now) < units
  }

  /**
   * The month's use as this replica last knew it, its unspent lease included (so never below what
   * was forwarded, give or take a second's flush): the alerts' hint that a threshold may be
   * crossed (alerts/quota-alerts.ts). null before the first answer.
   */
  use(): QuotaUse | null {
    const used = this.mode === 'local' ? this.localUsed : this.lastKnownUsed
    if (used === null) return null
    const use = {
      ...this.subject,
      requests: this.requests,
      month: this.month,
      used,
      alertThresholds: this.alertThresholds,
    }
    return this.shadow ? { ...use, shadow: true } : use
  }

  state(now: number): PolicyState {
    // From the month's bounds as held (brought up to date by the decision before): no date is
    // made for the RateLimit fields of every request.
    const inMonth = now >= this.monthStart && now < this.monthEnd
    return {
      name: this.name,
      quota: this.requests,
      windowSeconds: inMonth ? (this.monthEnd - this.monthStart) / 1000 : monthSeconds(now),
      remaining: this.remaining(now),
      resetSeconds: inMonth ? Math.max(1, Math.ceil((this.monthEnd - now) / 1000)) : secondsToNextMonth(now),
    }
  }

  retryAfterMs(now: number, units: number): number {
    if (this.exhausted(now, units)) return secondsToNextMonth(now) * 1000
    return Math.max(0, this.waitUntil - now)
  }
}
