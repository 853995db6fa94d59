// The credits' alerts (docs/events.md, Credits): `credits.low` when a meter's balance falls below
// its threshold share of the units its live grants gave, `credits.exhausted` when it reaches zero,
// each once until a new grant of the meter re-arms them; `credits.expired` once per grant whose
// expiry passed with units left. The hint is in memory (each credit the limiter holds, with its
// balance as its lease calls last saw it); Postgres decides, and the mark's winning insert writes
// the event, however many replicas see it.
import type { FastifyBaseLogger } from 'fastify'
import { gatewayOrigin, recordEvent } from '../events/record.js'
import type { CreditUse, Limiter } from '../limits/limiter.js'
import { presentCreditGrant } from '../schemas/present.js'
import { accountOf, claimMark } from '../store/alerts.js'
import { expiredUnmarked, readCreditState } from '../store/credit-grants.js'
import type { Sql } from '../store/db.js'
import { inTransaction } from '../store/transaction.js'

/** Expired grants written per check at most: the rest wait for the next (a second later). */
const EXPIRED_PER_CHECK = 100

export interface CreditAlertOptions {
  sql: Sql
  limiter: Limiter
  log: FastifyBaseLogger
}

/**
 * How far a balance is gone: 2 exhausted (at or below zero), 1 low (below `percent` % of
 * `granted`), else 0.
 */
type Depth = 0 | 1 | 2
const depthOf = (balance: number, granted: number, percent: number): Depth =>
  balance <= 0 ? 2 : balance * 100 < percent * granted ? 1 : 0

/**
 * How soon a balance the hint calls lower than Postgres does is asked about again, in ms: the
 * usage not written yet (the meter writes within a second), or the hint counting other replicas'
 * leases as spent. One read per such credit each time at most.
 */
const UNCONFIRMED_RECHECK_MS = 2_000

export class CreditAlerts {
  /** `<tenant>:<meter>` → the state last decided (`<granted>:<low|exhausted>`): not asked again. */
  private settled = new Map<string, string>()
  /** `<tenant>:<meter>` → when to ask again (performance.now(), ms): Postgres found it higher than the hint. */
  private unconfirmed = new Map<string, number>()
  private readonly options: CreditAlertOptions
  constructor(options: CreditAlertOptions) {
    this.options = options
  }

  async check(): Promise<void> {
    const settled = new Map<string, string>()
    const unconfirmed = new Map<string, number>()
    const now = performance.now()
    for (const use of this.options.limiter.creditUses()) {
      const depth = depthOf(use.remaining, use.granted, use.lowThresholdPercent)
      if (depth === 0) continue
      const key = `${use.tenantId}:${use.meter}`
      const state = `${use.granted}:${depth === 2 ? 'exhausted' : 'low'}`
      if (this.settled.get(key) === state) {
        settled.set(key, state)
        continue
      }
      const askAgainAt = this.unconfirmed.get(key)
      if (askAgainAt !== undefined && now < askAgainAt) {
        unconfirmed.set(key, askAgainAt)
        continue
      }
      try {
        // Settled only once Postgres's balance is as far gone as the hint says: a hint ahead of
        // the usage written (an answer charged, not flushed yet) is asked about again, not
        // taken for done, or its event would wait for the next grant.
        if ((await this.mark(use)) >= depth) settled.set(key, state)
        else unconfirmed.set(key, now + UNCONFIRMED_RECHECK_MS)
      } catch (err) {
        this.options.log.warn({ err }, 'credit alerts: checking a balance failed; will retry')
      }
    }
    this.settled = settled
    this.unconfirmed = unconfirmed
    await this.sweepExpired()
  }

  /**
   * Writes what Postgres's balance calls for and no replica wrote yet; says how far gone Postgres
   * found it (2 for a sub-account gone: nothing more to ask).
   */
  private async mark(use: CreditUse): Promise<Depth> {
    const { sql } = this.options
    return inTransaction(sql, async (tx): Promise<Depth> => {
      const state = await readCreditState(tx, use.tenantId, use.meter)
      const accountId = await accountOf(tx, use.tenantId)
      if (accountId === null) return 2
      const subject = `${use.tenantId}:${use.meter}`
      const object = {
        sub_account_id: use.tenantId,
        meter: use.meter,
        units_left: state.balance,
        granted_units: state.granted,
        low_threshold_percent: use.lowThresholdPercent,
      }
      const depth = depthOf(state.balance, state.granted, use.lowThresholdPercent)
      // A balance that fell through both thresholds writes both events.
      const kinds = (['credits.low', 'credits.exhausted'] as const).slice(0, depth)
      for (const kind of kinds) {
        if (!(await claimMark(tx, kind, subject, `g${state.newest}`))) continue
        await recordEvent(tx, gatewayOrigin, {
          accountId,
          type: kind,
          target: { type: 'sub_account', id: use.tenantId },
          object,
          previous: null,
        })
      }
      return depth
    })
  }

  /** `credits.expired` for each grant whose expiry passed: what was left of it is gone. */
  private async sweepExpired(): Promise<void> {
    const { sql } = this.options
    for (const grant of await expiredUnmarked(sql, EXPIRED_PER_CHECK)) {
      await inTransaction(sql, async (tx) => {
        if (!(await claimMark(tx, 'credits.expired', grant.id, 'expired'))) return
        await recordEvent(tx, gatewayOrigin, {
          accountId: grant.account_id,
          type: 'credits.expired',
          target: { type: 'credit_grant', id: grant.id },
          object: {
            ...presentCreditGrant(grant),
            sub_account_id: grant.sub_account_id,
            units_expired: grant.units_left,
          },
          previous: null,
        })
      })
    }
  }
}
