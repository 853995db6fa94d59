// A row of the request log (schema.ts): up to ROW_RECORDS records of one parent and day, in
// arrival order, each field an array, made as the records arrive (row-buffer.ts). How a row is
// written out, as a binary COPY tuple or in Postgres's text form, is row-forms.ts's.
import { micros } from './partitions.js'
import type { RequestRecord } from './capture.js'
import { hexCount, hexDigits, MADE_ID_LENGTH, MAX_ID_SPAN, madeIdParts } from './made-ids.js'

/** What RowBuilder.add did with a record: took it. */
export const ADDED = 0
/** Did not take it: its made id is too far above the row's (it begins the parent's next row). */
export const TOO_NEW = 1
/** Did not take it: too far below (a late record, for a row of such records: row-buffer.ts). */
export const TOO_OLD = -1

/** Builds one row's arrays as records come, in order; row-forms.ts writes it out in either form. */
export class RowBuilder {
  /**
   * Each record's id as the count of an id the gateway made with `idStem`, or -1 for an id given
   * by the client (in `givenIds`): a count costs no string kept until the row is written.
   */
  readonly madeCounts: number[] = []
  readonly times: number[] = []
  readonly tenants: string[] = []
  readonly keys: string[] = []
  readonly methods: string[] = []
  readonly routes: string[] = []
  readonly paths: string[] = []
  readonly statuses: number[] = []
  readonly codes: (string | null)[] = []
  readonly durations: number[] = []
  readonly requestBytes: number[] = []
  readonly responseBytes: number[] = []
  readonly ips: string[] = []
  readonly costs: number[] = []
  readonly units: (string | null)[] = []
  /** Some record's upstream reported units: else the row's `units` is null. */
  reported = false
  readonly wouldRefuse: (string | null)[] = []
  /** Some record a shadow limit would have refused: else the row's `would_refuse` is null. */
  shadowed = false
  /** Each record's outcome, null for `completed`; `cut` when some is not: else the row's `outcomes` is null. */
  readonly outcomes: (string | null)[] = []
  cut = false
  /** Each record's cell, null for none; `celled` when some has one: else the row's `cells` is null. */
  readonly cells: (string | null)[] = []
  celled = false
  /** Each record's trace id, null when not traced; `traced` when some was: else the row's `trace_ids` is null. */
  readonly traceIds: (string | null)[] = []
  traced = false
  readonly tenantSet = new Set<string>()
  readonly keySet = new Set<string>()
  readonly routeSet = new Set<string>()
  readonly statusSet = new Set<number>()
  readonly codeSet = new Set<string>()
  readonly refusedTenantSet = new Set<string>()
  readonly refusedKeySet = new Set<string>()
  readonly givenIds: string[] = []
  readonly givenPositions: number[] = []
  /** The characters of its records' paths: the one field a client sizes (up to the head's 16 KiB). */
  pathChars = 0
  first = Number.POSITIVE_INFINITY
  last = Number.NEGATIVE_INFINITY
  not2xx = false
  /** Some record has no code (any answer that is not a refusal). */
  codeless = false
  idStem: string | null = null
  idLow = Number.POSITIVE_INFINITY
  idHigh = Number.NEGATIVE_INFINITY

  /**
   * `day`: the day of its records (partitions.ts, dayOfRecord), whose partition it is written to.
   */
  readonly accountId: string
  readonly day: number
  constructor(accountId: string, day: number) {
    this.accountId = accountId
    this.day = day
  }

  /** Adds `record` (ADDED), unless its made id is too far from the row's (MAX_ID_SPAN): TOO_NEW or TOO_OLD, nothing changed. */
  add(record: RequestRecord): number {
    const count = record.idGiven ? -1 : this.madeCount(record.id)
    if (count === -1) {
      this.givenIds.push(record.id)
      this.givenPositions.push(this.madeCounts.length + 1)
    } else {
      const low = Math.min(this.idLow, count)
      const high = Math.max(this.idHigh, count)
      if (high - low > MAX_ID_SPAN) return count > this.idHigh ? TOO_NEW : TOO_OLD
      this.idLow = low
      this.idHigh = high
    }
    this.madeCounts.push(count)
    // Whole microseconds (an integer is cheaper to write out and for Postgres to read than a
    // float); the row's day and bounds are of these, so that a time rounded to midnight is kept
    // in the next day's partition, where `since` looks for it.
    const time = micros(record.timeMs)
    this.times.push(time)
    this.first = Math.min(this.first, time)
    this.last = Math.max(this.last, time)
    this.tenants.push(record.tenantId)
    this.tenantSet.add(record.tenantId)
    this.keys.push(record.keyId)
    this.keySet.add(record.keyId)
    this.methods.push(record.method)
    this.routes.push(record.route)
    this.routeSet.add(record.route)
    this.paths.push(record.path)
    this.pathChars += record.path.length
    this.statuses.push(record.status)
    this.statusSet.add(record.status)
    if (record.status < 200 || record.status > 299) {
      this.not2xx = true
      this.refusedTenantSet.add(record.tenantId)
      this.refusedKeySet.add(record.keyId)
    }
    this.codes.push(record.code)
    if (record.code === null) this.codeless = true
    else this.codeSet.add(record.code)
    this.durations.push(micros(record.durationMs))
    this.requestBytes.push(record.requestBytes)
    this.responseBytes.push(record.responseBytes)
    this.ips.push(record.sourceIp)
    // Negative for a request the gateway did not forward (schema.ts): it counted no units.
    this.costs.push(record.forwarded ? record.cost : -record.cost)
    this.units.push(record.units)
    if (record.units !== null) this.reported = true
    const wouldRefuse = record.wouldRefuse ?? null
    this.wouldRefuse.push(wouldRefuse)
    if (wouldRefuse !== null) this.shadowed = true
    const outcome = record.outcome === undefined || record.outcome === 'completed' ? null : record.outcome
    this.outcomes.push(outcome)
    if (outcome !== null) this.cut = true
    const cell = record.cell ?? null
    this.cells.push(cell)
    if (cell !== null) this.celled = true
    const traceId = record.traceId ?? null
    this.traceIds.push(traceId)
    if (traceId !== null) this.traced = true
    return ADDED
  }

  /** The count of an id the gateway made with this row's stem (the first such id sets it); -1 for any other. */
  private madeCount(id: string): number {
    if (this.idStem === null) {
      const made = madeIdParts(id)
      if (made === null) return -1
      this.idStem = made.stem
      return made.count
    }
    return id.length === MADE_ID_LENGTH && id.startsWith(this.idStem) ? hexCount(id) : -1
  }

  get size(): number {
    return this.madeCounts.length
  }

  /** Each forwarded record's tenant, end (ms), cost and reported units (a dropped row's, for reconciliation). */
  forEachForwarded(visit: (tenantId: string, endedAtMs: number, cost: number, unitsJson: string | null) => void): void {
    for (let i = 0; i < this.costs.length; i++)
      if (this.costs[i]! > 0)
        visit(this.tenants[i]!, (this.times[i]! + this.durations[i]!) / 1000, this.costs[i]!, this.units[i]!)
  }

  /** The records' ids, in order. */
  ids(): string[] {
    let given = 0
    return this.madeCounts.map((count) => (count === -1 ? this.givenIds[given++]! : this.idStem + hexDigits(count)))
  }
}
