// A sub-account's credits over time, per meter (docs/api.md, Credits): the units left in its live
// grants, point by point, from its grants (made, voided, expired) and the burn log, as plain
// functions of those rows (store/credit-history.ts reads them). A burn is known by its usage period
// only, so it is placed at its period's end (its bucket's, when the range holds more than
// MAX_BURN_POINTS periods), or now for the open one.
import type { CreditHistory, CreditHistoryKind } from '../schemas/credits.js'
import type { BurnBucketRow, GrantHistoryRow } from '../store/credit-history.js'

/** At most this many burn points a meter: a longer range sums several periods into each. */
export const MAX_BURN_POINTS = 1000

/** How long a bucket of burns is: whole usage periods, as few as keep the range within MAX_BURN_POINTS. */
export function burnBucketSeconds(periodSeconds: number, fromMs: number, untilMs: number): number {
  const periods = Math.ceil((untilMs - fromMs) / 1000 / periodSeconds)
  return periodSeconds * Math.max(1, Math.ceil(periods / MAX_BURN_POINTS))
}

interface Change {
  at: number
  kind: Exclude<CreditHistoryKind, 'start' | 'end'>
  change: number
  grantId: string | null
}

/** At one instant: grants first, then the burns, then what expired or was voided. */
const ORDER: Record<Change['kind'], number> = { granted: 0, burned: 1, expired: 2, voided: 3 }

/** The moment what was left of a grant was gone, and why; null while it is live at `nowMs`. */
function goneOf(grant: GrantHistoryRow, nowMs: number): { at: number; kind: 'expired' | 'voided' } | null {
  const voided = grant.voided_at?.getTime() ?? Number.POSITIVE_INFINITY
  const expires = grant.expires_at?.getTime() ?? Number.POSITIVE_INFINITY
  const at = Math.min(voided, expires)
  if (at > nowMs) return null
  return { at, kind: voided <= expires ? 'voided' : 'expired' }
}

export interface HistoryRange {
  /** The range's first instant (its first day's midnight, UTC). */
  fromMs: number
  /** Its last day's end, or now if sooner: the `end` point. */
  endMs: number
  nowMs: number
  bucketSeconds: number
}

/**
 * The series of each meter with a grant or named by `creditMeters`, in name order: `start` (what
 * was left at the range's first instant, every change before it summed), each change in the range
 * in time order, and `end`. A debt is not in it: `owed_units` says what is owed now.
 */
export function creditHistory(
  grants: readonly GrantHistoryRow[],
  burns: readonly BurnBucketRow[],
  creditMeters: readonly string[],
  debts: ReadonlyMap<string, number>,
  range: HistoryRange,
): CreditHistory['meters'] {
  const changes = new Map<string, Change[]>(creditMeters.map((meter) => [meter, []]))
  const of = (meter: string) => {
    const list = changes.get(meter) ?? []
    changes.set(meter, list)
    return list
  }
  for (const grant of grants) {
    const list = of(grant.meter)
    list.push({
      at: grant.created_at.getTime(),
      kind: 'granted',
      change: grant.units - grant.debt_paid,
      grantId: grant.id,
    })
    const gone = goneOf(grant, range.nowMs)
    if (gone !== null && grant.units_left > 0)
      list.push({ at: gone.at, kind: gone.kind, change: -grant.units_left, grantId: grant.id })
  }
  const bucketMs = range.bucketSeconds * 1000
  for (const burn of burns) {
    const starts = burn.bucket === null ? Number.NEGATIVE_INFINITY : range.fromMs + burn.bucket * bucketMs
    // A bucket that starts after the end (the range ended before now) is not the range's.
    if (starts >= range.endMs) continue
    const at = burn.bucket === null ? starts : Math.min(starts + bucketMs, range.endMs)
    of(burn.meter).push({ at, kind: 'burned', change: -burn.units, grantId: null })
  }
  const iso = (ms: number) => new Date(ms).toISOString()
  return [...changes.keys()].sort().map((meter) => {
    // A stable sort: grants keep the order they were made in.
    const list = changes.get(meter)!.sort((a, b) => a.at - b.at || ORDER[a.kind] - ORDER[b.kind])
    let left = 0
    let i = 0
    for (; i < list.length && list[i]!.at < range.fromMs; i++) left += list[i]!.change
    const points: CreditHistory['meters'][number]['points'] = [
      { at: iso(range.fromMs), kind: 'start', change: 0, units_left: left, grant_id: null },
    ]
    for (; i < list.length && list[i]!.at <= range.endMs; i++) {
      const { at, kind, change, grantId } = list[i]!
      left += change
      points.push({ at: iso(at), kind, change, units_left: left, grant_id: grantId })
    }
    points.push({ at: iso(range.endMs), kind: 'end', change: 0, units_left: left, grant_id: null })
    return { meter, owed_units: debts.get(meter) ?? 0, points }
  })
}
