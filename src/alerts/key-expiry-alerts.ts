// `api_key.expiring` (docs/events.md, Alerts): 7 days and 1 day before a key's expires_at, found
// by a sweep every replica runs (like the events' retention), each key's mark and its event
// written in one transaction by the replica whose insert of the mark wins.
import type { FastifyBaseLogger } from 'fastify'
import { keyObject } from '../auth/key-changes.js'
import { gatewayOrigin, recordEvent } from '../events/record.js'
import { claimMark, deleteMarksBefore, type ExpiringKey, expiringKeys, lockExpiringKey } from '../store/alerts.js'
import type { Sql } from '../store/db.js'
import { inTransaction } from '../store/transaction.js'

/** Days before expires_at that write an event (docs/events.md#alerts). */
export const EXPIRY_MARK_DAYS: readonly number[] = [7, 1]

const DAY_MS = 86_400_000
/** Marks are kept this long: past every month and key they could name again. */
const MARKS_KEPT_MS = 40 * DAY_MS
/** Keys per query: a sweep goes on until one comes back short. */
const BATCH = 500

export interface KeyExpiryAlertOptions {
  sql: Sql
  log: FastifyBaseLogger
  clock: () => number
}

export class KeyExpiryAlerts {
  private readonly options: KeyExpiryAlertOptions
  constructor(options: KeyExpiryAlertOptions) {
    this.options = options
  }

  /** Whether a key that ends at `expiresAt` is within a mark now: minted so, it is swept at once. */
  withinMark(expiresAt: Date | null): boolean {
    return expiresAt !== null && expiresAt.getTime() - this.options.clock() <= Math.max(...EXPIRY_MARK_DAYS) * DAY_MS
  }

  /** One sweep: every key due for a mark gets it, and its event; old marks go. Returns the events written. */
  async sweep(): Promise<number> {
    const { sql, clock } = this.options
    const now = new Date(clock())
    let written = 0
    for (;;) {
      const keys = await expiringKeys(sql, EXPIRY_MARK_DAYS, now, BATCH)
      for (const key of keys) if (await this.mark(key, now)) written++
      if (keys.length < BATCH) break
    }
    await deleteMarksBefore(sql, new Date(now.getTime() - MARKS_KEPT_MS))
    return written
  }

  /**
   * Every mark due, and the event of the most urgent only: a gateway that was down when the 7-day
   * mark passed says "1 day" once, not both. False when another replica made them first.
   */
  private mark(key: ExpiringKey, now: Date): Promise<boolean> {
    return inTransaction(this.options.sql, async (tx) => {
      // Read before this transaction: a roll or a revoke may have come since, or be under way.
      if (!(await lockExpiringKey(tx, key.id, now))) return false
      let won = false
      // Most urgent first: it decides whether this replica writes the event.
      for (const days of [...key.due_days].sort((a, b) => a - b)) {
        const claimed = await claimMark(tx, 'api_key.expiring', key.id, `${days}d`)
        if (days === key.days) won = claimed
      }
      if (!won) return false
      await recordEvent(tx, gatewayOrigin, {
        accountId: key.account_id,
        type: 'api_key.expiring',
        target: { type: 'api_key', id: key.id },
        object: { ...keyObject(key, key.account_id, now.getTime()), expires_in_days: key.days },
        previous: null,
      })
      return true
    })
  }
}
