// What one flush of the usage meter carries to Postgres (store/usage.ts, addUsage): the counts by
// day, by key, the units by period and the log's drops, the replica's mark, their bounds, and each
// count as the JSON row the statement reads.

export interface UsageCount {
  tenantId: string
  /** UTC date, YYYY-MM-DD. */
  day: string
  /** 2 … 5 */
  statusClass: number
  requests: number
  /** Of `requests`, those forwarded upstream (what a monthly quota counts); 0 if absent. */
  forwarded?: number
  /** 429s of a rate limit and of a monthly quota (on the 4xx row only); 0 if absent. */
  limitedRate?: number
  limitedQuota?: number
}

/** A key's requests of one day and status class, for the tenant it acted as (usage by key). */
export interface KeyUsageCount {
  tenantId: string
  keyId: string
  day: string
  statusClass: number
  requests: number
}

/** Units of a tenant acted as, in one usage period, of one meter (usage_period_units). */
export interface PeriodUnitCount {
  tenantId: string
  /** The period's start, ISO 8601 UTC. */
  periodStart: string
  meter: string
  units: number
  /** The forwarded requests that counted them. */
  requests: number
  /** Of `units`, those a limit charged and those under no limit (reconciliation); 0 if absent. */
  charged?: number
  unlimited?: number
}

/** Units of forwarded requests whose request log records were dropped, by the period they were served in. */
export interface LogDropCount {
  tenantId: string
  periodStart: string
  meter: string
  units: number
}

/** A key's units of one day and meter, for the tenant it acted as (usage_daily_key_units). */
export interface KeyUnitCount {
  tenantId: string
  keyId: string
  day: string
  meter: string
  units: number
}

/**
 * The most any usage count holds (docs/billing.md, Bounds): 2^53 − 1, the largest integer every
 * JSON reader keeps exact (RFC 7493 §2.2, Number.MAX_SAFE_INTEGER), 9,007 times a day of 10^12
 * units, far below bigint's 2^63 − 1. A row's sum stops there (saturates) instead of failing the
 * flush that would carry it past: each upsert below adds `least(row, MAX − added) + added`, which
 * never leaves bigint, whatever the row held. Written as the literal 9007199254740991 in the SQL.
 */
export const USAGE_COUNT_MAX = Number.MAX_SAFE_INTEGER

/** How long a flush's id is remembered: a retry later than that could add its counts twice. */
export const BATCH_MEMORY = '1 day'

/** A replica's word that everything it counted before `through` (its clock) is in this flush or before. */
export interface FlushMark {
  replicaId: string
  through: Date
}

/** One flush's counts; `mark` when a replica's meter sends it (see addUsage). */
export interface UsageBatch {
  counts: readonly UsageCount[]
  keyCounts?: readonly KeyUsageCount[]
  unitCounts?: readonly PeriodUnitCount[]
  keyUnitCounts?: readonly KeyUnitCount[]
  logDropCounts?: readonly LogDropCount[]
  mark?: FlushMark
  /**
   * When the batch's oldest count was made: its units burn the credit grants that were live then
   * (one expired since took units used before its expiry). Absent: now.
   */
  since?: Date
}

/** Each count as the row jsonb_to_recordset reads in addUsage. */
export const usageJson = (c: UsageCount) => ({
  tenant_id: c.tenantId,
  day: c.day,
  status_class: c.statusClass,
  requests: c.requests,
  forwarded: c.forwarded ?? 0,
  limited_rate: c.limitedRate ?? 0,
  limited_quota: c.limitedQuota ?? 0,
})

export const keyUsageJson = (c: KeyUsageCount) => ({
  tenant_id: c.tenantId,
  key_id: c.keyId,
  day: c.day,
  status_class: c.statusClass,
  requests: c.requests,
})

export const unitJson = (c: PeriodUnitCount) => ({
  tenant_id: c.tenantId,
  period_start: c.periodStart,
  meter: c.meter,
  units: c.units,
  requests: c.requests,
  charged: c.charged ?? 0,
  unlimited: c.unlimited ?? 0,
})

export const logDropJson = (c: LogDropCount) => ({
  tenant_id: c.tenantId,
  period_start: c.periodStart,
  meter: c.meter,
  units: c.units,
})

export const keyUnitJson = (c: KeyUnitCount) => ({
  tenant_id: c.tenantId,
  key_id: c.keyId,
  day: c.day,
  meter: c.meter,
  units: c.units,
})
