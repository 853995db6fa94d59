// Usage reconciliation (docs/billing.md, Reconciliation): per sub-account and meter of a range, the
// usage meter's units beside what the limiter charged, what the request log recorded and what was
// exported, each difference from the meter explained by its kind, or flagged `unexplained`.
import type { LogUnitSum } from '../request-log/unit-sums.js'
import type { CreditLedgerRow } from '../store/credit-grants.js'
import { NO_COUNTS, type ReconciliationCounts } from '../store/usage-reconciliation.js'

/** What explains a difference between the meter and one of the other counts. */
export type DifferenceKind =
  /** Request log records dropped (its buffer was full while Postgres fell behind). */
  | 'log_dropped'
  /** Units a replica flushed after their period had closed: billed in the first open one. */
  | 'late'
  /** Periods not closed yet: their counts still move, and nothing of them is exported. */
  | 'open_period'
  /** The request log no longer holds the range (its retention), or never did. */
  | 'log_expired'
  /** Closed periods the receiver has not acknowledged yet. */
  | 'not_exported'
  /** Requests forwarded while no limit applied to the sub-account (a limit set or cleared within the range). */
  | 'not_limited'
  /**
   * A replica was killed (or cut off for good) while serving the range: what it counted after its
   * last flush is lost to the meter, and its request log's last records to the log, apart.
   */
  | 'replica_lost'
  | 'unexplained'

export interface Difference {
  /** The count the meter is compared with. */
  against: 'limiter' | 'log' | 'export'
  kind: DifferenceKind
  /** The meter's units minus the other count's, for this kind; negative when the other holds more. */
  units: number
}

export interface ReconciliationEntry {
  account_id: string
  sub_account_id: string | null
  meter: string
  meter_units: number
  /** Null when no limit charged any of the range's units. */
  limiter_units: number | null
  /** Null when the request log does not hold the range. */
  log_units: number | null
  exported_units: number
  differences: Difference[]
}

/**
 * The entries of a range: the store's counts with the log's sums (null: the log does not hold it).
 * `replicaLost`: a replica was lost while serving the range's closed periods (store/usage-periods.ts).
 */
export function reconcile(
  counts: readonly ReconciliationCounts[],
  log: readonly LogUnitSum[] | null,
  replicaLost = false,
): ReconciliationEntry[] {
  const logged = new Map<string, LogUnitSum>()
  for (const sum of log ?? []) logged.set(`${sum.tenant_id} ${sum.meter}`, sum)
  const entries = counts.map((row) => {
    const sum = log === null ? null : (logged.get(`${row.tenant_id} ${row.meter}`) ?? NO_RECORDS)
    logged.delete(`${row.tenant_id} ${row.meter}`)
    return entryOf(row, sum, replicaLost)
  })
  // What the log holds and the meter never counted: all of it unexplained.
  for (const sum of logged.values()) {
    if (Number(sum.closed_units) + Number(sum.open_units) === 0) continue
    const own = sum.tenant_id === sum.account_id
    const counts = { tenant_id: sum.tenant_id, account_id: sum.account_id, sub_account_id: own ? null : sum.tenant_id }
    entries.push(entryOf({ ...NO_COUNTS, ...counts, meter: sum.meter }, sum, replicaLost))
  }
  return entries
}

const NO_RECORDS: LogUnitSum = { account_id: '', tenant_id: '', meter: '', closed_units: '0', open_units: '0' }

function entryOf(row: ReconciliationCounts, log: LogUnitSum | null, replicaLost: boolean): ReconciliationEntry {
  const meter = Number(row.meter_units)
  const closedMeter = Number(row.closed_meter_units)
  // Late units come into the range's periods (billed here, served before) and go out of them
  // (served here, billed later): each side counted where it happened, so a flush that lost one
  // shows as unexplained, not as late.
  const late = Number(row.late_units) - Number(row.late_out_units)
  const closedLate = Number(row.closed_late_units) - Number(row.closed_late_out_units)
  const charged = Number(row.limiter_units)
  const exported = Number(row.exported_units)
  const differences: Difference[] = []
  const add = (against: Difference['against'], kind: DifferenceKind, units: number) => {
    if (units !== 0) differences.push({ against, kind, units })
  }
  // The limiter counts in the same flush as the meter, by the period a request was served in.
  if (charged > 0) {
    const unlimited = Number(row.unlimited_units)
    add('limiter', 'late', late)
    add('limiter', 'not_limited', unlimited)
    add('limiter', 'unexplained', meter - late - unlimited - charged)
  }
  // The log is written apart, a second behind: its open periods' records may still be on their way.
  let logUnits: number | null = null
  if (log === null) add('log', 'log_expired', meter)
  else {
    const closedLog = Number(log.closed_units)
    logUnits = closedLog + Number(log.open_units)
    const dropped = Number(row.closed_log_dropped_units)
    add('log', 'late', closedLate)
    add('log', 'log_dropped', dropped)
    add('log', 'open_period', meter - closedMeter - Number(log.open_units))
    // The meter and the log flush apart: a replica killed between its flushes loses some of each.
    add('log', replicaLost ? 'replica_lost' : 'unexplained', closedMeter - closedLate - dropped - closedLog)
  }
  add('export', 'open_period', meter - closedMeter)
  add('export', 'not_exported', closedMeter - exported)
  return {
    account_id: row.account_id,
    sub_account_id: row.sub_account_id,
    meter: row.meter,
    meter_units: meter,
    limiter_units: charged > 0 ? charged : null,
    log_units: logUnits,
    exported_units: exported,
    differences,
  }
}

/** A credit ledger as reconciliation shows it: every unit granted is left, expired, paid a debt, or burned. */
export function reconcileCredits(rows: readonly CreditLedgerRow[]) {
  return rows.map((row) => ({
    sub_account_id: row.sub_account_id,
    meter: row.meter,
    granted_units: row.granted,
    left_units: row.left,
    expired_units: row.expired,
    debt_paid_units: row.debt_paid,
    burned_units: row.burned,
    unexplained_units: row.granted - row.left - row.expired - row.debt_paid - row.burned,
  }))
}
