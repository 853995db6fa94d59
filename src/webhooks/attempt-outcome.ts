// What an attempt's result does (docs/events.md, Delivery), written in one transaction: the
// attempt for the deliveries route, the delivery moved on (if this worker still holds its lease),
// and the endpoint's run of failures, which a 410 or five days of failures end by disabling it.
import type { Sql } from '../store/db.js'
import { inTransaction } from '../store/transaction.js'
import {
  type ClaimedDelivery,
  clearFailingSince,
  disableEndpoint,
  insertAttempt,
  markFailing,
  settleDelivery,
} from '../store/webhook-deliveries.js'
import type { DeliveryResult } from './deliver.js'
import { FAILING_DAYS_BEFORE_DISABLE, nextAttemptAt, type RetrySchedule } from './retry-schedule.js'

const DAY_MS = 86_400_000

/** How an attempt ended, as the deliveries metric counts it. */
export type AttemptOutcome = 'succeeded' | 'retrying' | 'gave_up' | 'endpoint_disabled'

export const ATTEMPT_OUTCOMES: readonly AttemptOutcome[] = ['succeeded', 'retrying', 'gave_up', 'endpoint_disabled']

export const GONE_REASON = 'the endpoint answered 410 Gone'
export const FAILING_REASON = `every delivery failed for ${FAILING_DAYS_BEFORE_DISABLE} days`

export async function recordAttempt(
  sql: Sql,
  delivery: ClaimedDelivery,
  result: DeliveryResult,
  options: { schedule: RetrySchedule; attemptedAt: Date; endedAt: Date },
): Promise<AttemptOutcome> {
  const { attemptedAt } = options
  const attempt = { delivery, status: result.status, error: result.error, durationMs: result.durationMs, attemptedAt }
  // The endpoint's row is locked before the delivery's, as DELETE and disabling lock them (and
  // the endpoint's pending deliveries): the other order deadlocked with them.
  return inTransaction(sql, async (tx) => {
    if (result.error === null) {
      await clearFailingSince(tx, delivery.endpointId)
      await insertAttempt(tx, { ...attempt, nextAttemptAt: null })
      await settleDelivery(tx, delivery, { state: 'succeeded' })
      return 'succeeded'
    }
    const failingSince = await markFailing(tx, delivery.endpointId, attemptedAt)
    let disableReason: string | null = null
    if (result.status === 410) disableReason = GONE_REASON
    else if (attemptedAt.getTime() - failingSince.getTime() >= FAILING_DAYS_BEFORE_DISABLE * DAY_MS)
      disableReason = FAILING_REASON
    // The delay runs from the attempt's end: a retry "after 5 s" is not due at once after an
    // attempt that took the whole 15 s timeout.
    const next = disableReason === null ? nextAttemptAt(options.schedule, delivery.attempt, options.endedAt) : null
    const held = await settleDelivery(tx, delivery, next === null ? { state: 'failed' } : { next })
    // Not held: cancelled meanwhile (its endpoint deleted or disabled) or taken over by another
    // worker. This attempt then names no next one: none of its own will be made.
    await insertAttempt(tx, { ...attempt, nextAttemptAt: held ? next : null })
    if (disableReason !== null) {
      // Disabling cancels the endpoint's other pending deliveries. Disabled already (by another
      // attempt's 410, say) or deleted: this attempt only ended its own delivery.
      if (await disableEndpoint(tx, delivery.endpointId, attemptedAt, disableReason)) return 'endpoint_disabled'
      return 'gave_up'
    }
    return held && next !== null ? 'retrying' : 'gave_up'
  })
}
