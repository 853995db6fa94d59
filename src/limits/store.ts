// Limits of tenants and the use a monthly quota counts (docs/api.md, Limits and quotas). SQL only.
import { type Origin, recordEvent } from '../events/record.js'
import { sameJson } from '../events/same-json.js'
import {
  LIMIT_BOUNDS,
  LimitValueError,
  shownLimits,
  storedLimits,
  type MeterQuota,
  type MeterRate,
  type MonthlyQuota,
  type RateLimit,
  type TenantLimits,
} from '../shared/tenant-limits.js'
import type { Sql, Tx } from '../store/db.js'
import { Statement } from '../store/statement.js'
import { COLUMNS, getTenant, type TenantRow } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'

type Db = Sql | Tx

/** A tenant's limits (null: none, or no such tenant). */
export async function readLimits(db: Db, tenantId: string): Promise<TenantLimits | null> {
  const [row] = await db<{ limits: TenantLimits | null }[]>`select limits from tenants where id = ${tenantId}`
  return row?.limits ?? null
}

/**
 * Replaces a parent account's limits (the operator's, through the CLI); null clears them. Null
 * back when `accountId` names no parent account (a sub-account's are its parent's to set).
 */
export async function writeAccountLimits(
  db: Db,
  accountId: string,
  limits: TenantLimits | null,
): Promise<TenantRow | null> {
  const stored = storedLimits(limits)
  const [row] = await db<TenantRow[]>`
    update tenants set limits = ${stored === null ? null : db.json(stored)}, updated_at = now()
    where id = ${accountId} and parent_id is null
    returning ${db.unsafe(COLUMNS)}`
  return row ?? null
}

/**
 * A change of some members: a member given replaces that limit (null removes it), one left out
 * stays. `meter`: the change is of that route meter's limits, the request units' stay.
 */
export type LimitsChange = (
  | { meter?: undefined; rate?: RateLimit | null; monthly_quota?: MonthlyQuota | null }
  | { meter: string; rate?: MeterRate | null; monthly_quota?: MeterQuota | null }
) & {
  /** The change is of the shadow limits (docs/api.md, Shadow limits); the enforced ones stay. */
  shadow?: boolean
}

/** The limits after a change (as stored: storedLimits drops what sets nothing). */
function changedLimits(current: TenantLimits | null, change: LimitsChange): TenantLimits {
  const kept = { rate: current?.rate ?? null, monthly_quota: current?.monthly_quota ?? null }
  const meters = current?.meters === undefined ? {} : { meters: current.meters }
  const shadow = current?.shadow === undefined ? {} : { shadow: current.shadow }
  if (change.shadow === true)
    return { ...kept, ...meters, shadow: changedLimits(current?.shadow ?? null, { ...change, shadow: false }) }
  if (change.meter === undefined)
    return {
      rate: change.rate === undefined ? kept.rate : change.rate,
      monthly_quota: change.monthly_quota === undefined ? kept.monthly_quota : change.monthly_quota,
      ...meters,
      ...shadow,
    }
  const byName = current?.meters
  const meter = byName !== undefined && Object.hasOwn(byName, change.meter) ? byName[change.meter] : undefined
  const changed = {
    rate: change.rate === undefined ? (meter?.rate ?? null) : change.rate,
    monthly_quota: change.monthly_quota === undefined ? (meter?.monthly_quota ?? null) : change.monthly_quota,
  }
  return { ...kept, meters: { ...current?.meters, [change.meter]: changed }, ...shadow }
}

/** The id names no tenant, or a sub-account (whose limits its parent sets through the API). */
export class NotAnAccountError extends Error {
  override name = 'NotAnAccountError'
  readonly id: string
  readonly subAccount: boolean
  constructor(id: string, subAccount: boolean) {
    super(subAccount ? `${id} is a sub-account` : `no parent account ${id}`)
    this.id = id
    this.subAccount = subAccount
  }
}

/**
 * Changes a parent account's limits member by member (the operator's `accounts limits`): the row
 * is locked between reading the limits it keeps and writing, so two changes of different members
 * at once both stand. A change writes its `account.limits_updated` event in the same transaction;
 * one that changes nothing writes neither the row nor an event.
 */
export function setAccountLimits(
  sql: Sql,
  accountId: string,
  change: LimitsChange,
  origin: Origin,
): Promise<TenantRow> {
  return inTransaction(sql, async (tx) => {
    const [current] = await tx<{ parent_id: string | null; limits: TenantLimits | null }[]>`
      select parent_id, limits from tenants where id = ${accountId} for update`
    if (current === undefined || current.parent_id !== null)
      throw new NotAnAccountError(accountId, current !== undefined)
    const next = changedLimits(current.limits, change)
    const stored = storedLimits(next)
    const kept = change.shadow === true ? stored?.shadow?.meters : stored?.meters
    if (kept !== undefined && Object.keys(kept).length > LIMIT_BOUNDS.meters)
      throw new LimitValueError(
        `--meter ${change.meter}: an account may have limits in at most ${LIMIT_BOUNDS.meters} meters; --clear one first`,
      )
    const before = shownLimits(current.limits)
    const after = shownLimits(storedLimits(next))
    if (sameJson(before, after)) return (await getTenant(tx, accountId))!
    const account = (await writeAccountLimits(tx, accountId, next))!
    await recordEvent(tx, origin, {
      accountId,
      type: 'account.limits_updated',
      target: { type: 'account', id: accountId },
      object: {
        id: account.id,
        name: account.name,
        external_id: account.external_id,
        created_at: account.created_at.toISOString(),
        limits: after,
      },
      previous: { limits: before },
    })
    return account
  })
}

/** Whose use a quota counts: one tenant's own, or a parent account's with all its sub-accounts'. */
export interface MonthUseOf {
  tenantId: string
  level: 'sub_account' | 'account'
}

/** `YYYY-MM` → the first day of that month and of the next, as dates. */
export function monthDays(month: string): { first: string; next: string } {
  const match = /^(\d{4})-(\d{2})$/.exec(month)
  if (match === null) throw new Error(`not a month YYYY-MM: ${month}`)
  const year = Number(match[1])
  const index = Number(match[2]) - 1
  const day = (y: number, m: number) => new Date(Date.UTC(y, m, 1)).toISOString().slice(0, 10)
  return { first: day(year, index), next: day(year, index + 1) }
}

/**
 * Request units of one UTC month (`YYYY-MM`): its forwarded requests, each at its route's cost,
 * what a monthly quota counts (refusals left out); or a route meter's units (`meter`). At the `account` level, those acting as the
 * parent and as any of its sub-accounts. Counts reach Postgres with the usage meter's flush, about
 * a second after the answer.
 */
export async function monthUse(db: Db, of: MonthUseOf, month: string, meter = 'requests'): Promise<number> {
  const { first, next } = monthDays(month)
  const s = new Statement()
  const [tenant, from, until, unit] = [s.param(of.tenantId), s.param(first), s.param(next), s.param(meter)]
  const period = `u.meter = ${unit} and u.period_start >= ${from}::date::timestamp at time zone 'UTC'
    and u.period_start < ${until}::date::timestamp at time zone 'UTC'`
  const [row] = await s.runPlannedEachTime<{ used: string }[]>(
    db,
    of.level === 'sub_account'
      ? `select coalesce(sum(u.units), 0)::text as used from usage_period_units u
         where u.tenant_id = ${tenant} and ${period}`
      : `select coalesce(sum(u.units), 0)::text as used
         from tenants t join usage_period_units u on u.tenant_id = t.id
         where (t.id = ${tenant} or t.parent_id = ${tenant}) and ${period}`,
  )
  return Number(row!.used)
}

/**
 * Each sub-account's use, by meter (`<tenant> <meter>` → units), in the usage periods that start
 * in [from, until): what a simulated quota counts before its first replayed request
 * (limits/simulation.ts), but for the period its range begins in.
 */
export async function periodUseBetween(
  db: Db,
  accountId: string,
  from: Date,
  until: Date,
): Promise<Map<string, number>> {
  const rows = await db<{ tenant_id: string; meter: string; units: string }[]>`
    select u.tenant_id, u.meter, sum(u.units)::text as units
    from tenants t join usage_period_units u on u.tenant_id = t.id
    where t.parent_id = ${accountId} and u.period_start >= ${from} and u.period_start < ${until}
    group by 1, 2`
  return new Map(rows.map((row) => [`${row.tenant_id} ${row.meter}`, Number(row.units)]))
}
