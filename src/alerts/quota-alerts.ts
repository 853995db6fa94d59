// `usage.threshold_reached` (docs/events.md, Alerts): a tenant's forwarded requests of the month
// (or a route meter's units) reach a share of its monthly quota (80 % and 100 %), once per month
// and threshold. The hint is
// in memory: each quota the limiter holds, with the month's use as its lease calls last saw it
// (never below what was forwarded). Only when that reaches a threshold not yet settled does the
// replica ask Postgres, the source of truth: the month's forwarded requests, counted by every
// replica's usage flush, and the threshold's mark, whose winning insert writes the event.
import type { FastifyBaseLogger } from 'fastify'
import { gatewayOrigin, recordEvent } from '../events/record.js'
import type { Limiter } from '../limits/limiter.js'
import { monthUse } from '../limits/store.js'
import type { QuotaUse } from '../limits/types.js'
import { accountOf, claimMark } from '../store/alerts.js'
import type { Sql } from '../store/db.js'
import { inTransaction } from '../store/transaction.js'

/** Shares of a monthly quota, in %, that write an event (docs/events.md#alerts). */
export const DEFAULT_QUOTA_THRESHOLDS: readonly number[] = [80, 100]

export interface QuotaAlertOptions {
  sql: Sql
  limiter: Limiter
  log: FastifyBaseLogger
  thresholds: readonly number[]
}

/** The requests a threshold of `requests` is reached at: 80 % of 1,001 is 801. */
export const thresholdRequests = (requests: number, percent: number) => Math.ceil((requests * percent) / 100)

export class QuotaAlerts {
  /** `<level>:<tenant>:<month>` → thresholds whose mark is made (by any replica): never asked again. */
  private settled = new Map<string, Set<number>>()

  private readonly options: QuotaAlertOptions
  constructor(options: QuotaAlertOptions) {
    this.options = options
  }

  /** Asks Postgres about each quota whose known use reaches a threshold not settled yet. */
  async check(): Promise<void> {
    const settled = new Map<string, Set<number>>()
    for (const use of this.options.limiter.quotaUses()) {
      const key = `${use.level}:${use.tenantId}:${use.shadow ? 's:' : ''}${use.meter}:${use.month}`
      // Only the quotas held now are remembered: a quota forgotten and used again costs one question.
      const done = this.settled.get(key) ?? new Set<number>()
      settled.set(key, done)
      const open = (use.alertThresholds ?? this.options.thresholds).filter(
        (percent) => !done.has(percent) && use.used >= thresholdRequests(use.requests, percent),
      )
      if (open.length === 0) continue
      try {
        for (const percent of await this.mark(use, open)) done.add(percent)
      } catch (err) {
        this.options.log.warn({ err }, 'quota alerts: checking a threshold failed; will retry')
      }
    }
    this.settled = settled
  }

  /**
   * In one transaction: the month's forwarded requests, then a mark (and its event) for each
   * threshold they reach, lowest first. Returns the thresholds settled (marked, by this replica
   * or another); one not reached yet in Postgres (counts of another replica not flushed yet, or
   * a lease not spent) is asked again at the next check.
   */
  private mark(use: QuotaUse, thresholds: readonly number[]): Promise<number[]> {
    const level = use.level === 'account' ? 'account' : 'sub_account'
    // A route meter's quota counts its units: its policy names the meter, its quota says `units`.
    const metered = use.meter !== 'requests'
    const at = use.shadow ? `${level}.shadow` : level
    const policy = metered ? `${at}.meters.${use.meter}.monthly_quota` : `${at}.monthly_quota`
    const shares = use.alertThresholds ?? this.options.thresholds
    const quota = metered
      ? { units: use.requests, alert_thresholds: shares }
      : { requests: use.requests, alert_thresholds: shares }
    return inTransaction(this.options.sql, async (tx) => {
      const used = await monthUse(tx, { tenantId: use.tenantId, level }, use.month, use.meter)
      const reached = thresholds.filter((percent) => used >= thresholdRequests(use.requests, percent))
      if (reached.length === 0) return []
      const accountId = await accountOf(tx, use.tenantId)
      if (accountId === null) return reached
      for (const percent of reached) {
        if (!(await claimMark(tx, 'usage.threshold_reached', `${policy}:${use.tenantId}`, `${use.month}:${percent}`)))
          continue
        await recordEvent(tx, gatewayOrigin, {
          accountId,
          type: 'usage.threshold_reached',
          target: { type: level, id: use.tenantId },
          object: {
            policy,
            tenant_id: use.tenantId,
            month: use.month,
            threshold_percent: percent,
            ...(metered ? { meter: use.meter } : {}),
            monthly_quota: quota,
            used,
          },
          previous: null,
          ...(use.shadow ? { shadow: true as const } : {}),
        })
      }
      return reached
    })
  }
}
