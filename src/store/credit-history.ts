// What a sub-account's credits did over time (docs/api.md, Credits): its grants as made, voided and
// expired, and the burn log (credit_burns) summed by meter and bucket of usage periods. SQL only;
// management/credit-history.ts makes the series.
import type { Sql } from './db.js'

/** A grant as its history needs it: what it gave, what it paid of a debt, and what was left of it. */
export interface GrantHistoryRow {
  id: string
  meter: string
  units: number
  /** Paid, when it was made, of what the sub-account owed: it never counted as units left. */
  debt_paid: number
  /** What use has not burned (what was gone at its void or expiry, once it was voided or expired). */
  units_left: number
  created_at: Date
  expires_at: Date | null
  voided_at: Date | null
}

/** Units burned from the sub-account's grants of a meter: before the range (bucket null), or in a bucket of it. */
export interface BurnBucketRow {
  meter: string
  /** The bucket's number from the range's start (bucketSeconds each); null: before the range. */
  bucket: number | null
  units: number
}

/** Every grant of the sub-account, in the order they were made. */
export function grantHistory(sql: Sql, accountId: string, subAccountId: string): Promise<GrantHistoryRow[]> {
  return sql<GrantHistoryRow[]>`
    select id, meter, units::float8 as units, debt_paid::float8 as debt_paid, units_left::float8 as units_left,
           created_at, expires_at, voided_at
    from credit_grants where account_id = ${accountId} and sub_account_id = ${subAccountId}
    order by seq`
}

/**
 * The burns of periods that started before `until`, by meter: those of periods before `from` in one
 * sum, the others by bucket of `bucketSeconds` from `from` (a bucket holds whole periods: both are
 * period boundaries, and a bucket is a whole number of periods).
 */
export function burnBuckets(
  sql: Sql,
  subAccountId: string,
  range: { from: Date; until: Date; bucketSeconds: number },
): Promise<BurnBucketRow[]> {
  return sql<BurnBucketRow[]>`
    select g.meter,
           case when b.period_start < ${range.from} then null
                else floor(extract(epoch from b.period_start - ${range.from}::timestamptz) / ${range.bucketSeconds})::int
           end as bucket,
           sum(b.units)::float8 as units
    from credit_grants g join credit_burns b on b.grant_id = g.id
    where g.sub_account_id = ${subAccountId} and b.period_start < ${range.until} and b.units > 0
    group by 1, 2 order by 1, 2 nulls first`
}
