// A row of the request log (schema.ts): up to ROW_RECORDS records of one parent and day, in
// arrival order, each field an array, made as the records arrive (row-buffer.ts). The writer sends
// a batch's rows to a real Postgres as a binary COPY (copy-format.ts), whose values Postgres
// stores without parsing them; to the embedded PGlite, which takes no COPY from a client, as one
// JSON parameter of arrays in Postgres's text form (bench/README.md, the request log).
import { arrayOf, element, nullableTexts } from './array-literals.js'
import type { CopyBuffer } from './copy-format.js'
import { micros } from './partitions.js'
import type { RequestRecord } from './capture.js'
import { hexCount, hexDigits, MADE_ID_LENGTH, MAX_ID_SPAN, madeIdParts } from './made-ids.js'
import { CELL_ARRAYS, OUTCOME_ARRAYS, RECORD_ARRAYS, SHADOW_ARRAYS, TRACE_ARRAYS, UNIT_ARRAYS } from './schema.js'

/** A row as the writer's INSERT reads it (json_to_recordset's column list in writer.ts). */
export interface LogRow {
  account_id: string
  first_us: number
  last_us: number
  records: number
  tenant_set: string
  key_set: string
  route_set: string
  status_set: string
  code_set: string
  not_2xx: boolean
  refused_tenant_set: string
  refused_key_set: string
  id_stem: string | null
  id_low: number | null
  id_high: number | null
  given_ids: string | null
  given_positions: string | null
  ids: string
  times_us: string
  tenant_ids: string
  key_ids: string
  methods: string
  routes: string
  paths: string
  statuses: string
  codes: string
  durations_us: string
  request_bytes: string
  response_bytes: string
  source_ips: string
  costs: string
  units: string | null
  would_refuse: string | null
  outcomes: string | null
  cells: string | null
  trace_ids: string | null
}

/** What RowBuilder.add did with a record: took it. */
export const ADDED = 0
/** Did not take it: its made id is too far above the row's (it begins the parent's next row). */
export const TOO_NEW = 1
/** Did not take it: too far below (a late record, for a row of such records: row-buffer.ts). */
export const TOO_OLD = -1

/** The columns a row is written to (schema.ts), in the order of LogRow and of `encode`'s fields. */
export const ROW_COLUMNS = `account_id, first_time, last_time, records, tenant_set, key_set, route_set, status_set,
  code_set, not_2xx, refused_tenant_set, refused_key_set, id_stem, id_low, id_high, given_ids, given_positions,
  ${RECORD_ARRAYS}, ${UNIT_ARRAYS}, ${SHADOW_ARRAYS}, ${OUTCOME_ARRAYS}, ${CELL_ARRAYS}, ${TRACE_ARRAYS}`
const COPY_FIELDS = ROW_COLUMNS.split(',').length

/** Builds one row's arrays as records come, in order; then writes it out in either form. */
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

  /** The row as the JSON insert reads it: each array in Postgres's text form. */
  row(): LogRow {
    const made = this.idLow <= this.idHigh
    const texts = (values: Iterable<string>) => arrayOf(Array.from(values, element))
    return {
      account_id: this.accountId,
      first_us: this.first,
      last_us: this.last,
      records: this.size,
      tenant_set: arrayOf([...this.tenantSet]),
      key_set: arrayOf([...this.keySet]),
      route_set: texts(this.routeSet),
      status_set: arrayOf([...this.statusSet]),
      code_set: texts(this.codeSet),
      not_2xx: this.not2xx,
      refused_tenant_set: arrayOf([...this.refusedTenantSet]),
      refused_key_set: arrayOf([...this.refusedKeySet]),
      id_stem: made ? this.idStem : null,
      id_low: made ? this.idLow : null,
      id_high: made ? this.idHigh : null,
      given_ids: this.givenIds.length === 0 ? null : texts(this.givenIds),
      given_positions: this.givenPositions.length === 0 ? null : arrayOf(this.givenPositions),
      ids: texts(this.ids()),
      times_us: arrayOf(this.times),
      tenant_ids: arrayOf(this.tenants),
      key_ids: arrayOf(this.keys),
      methods: texts(this.methods),
      routes: texts(this.routes),
      paths: texts(this.paths),
      statuses: arrayOf(this.statuses),
      codes: nullableTexts(this.codes),
      durations_us: arrayOf(this.durations),
      request_bytes: arrayOf(this.requestBytes),
      response_bytes: arrayOf(this.responseBytes),
      source_ips: texts(this.ips),
      costs: arrayOf(this.costs),
      units: this.reported ? nullableTexts(this.units) : null,
      would_refuse: this.shadowed ? nullableTexts(this.wouldRefuse) : null,
      outcomes: this.cut ? nullableTexts(this.outcomes) : null,
      cells: this.celled ? nullableTexts(this.cells) : null,
      trace_ids: this.traced ? nullableTexts(this.traceIds) : null,
    }
  }

  /** The row as a tuple of the binary COPY, its fields in the order of ROW_COLUMNS. */
  encode(out: CopyBuffer): void {
    const made = this.idLow <= this.idHigh
    out.tuple(COPY_FIELDS)
    out.uuidValue(this.accountId)
    out.timestampValue(this.first)
    out.timestampValue(this.last)
    out.int4Value(this.size)
    out.uuids([...this.tenantSet])
    out.uuids([...this.keySet])
    out.texts([...this.routeSet])
    out.int2s([...this.statusSet])
    out.texts([...this.codeSet])
    out.boolValue(this.not2xx)
    out.uuids([...this.refusedTenantSet])
    out.uuids([...this.refusedKeySet])
    if (made) {
      out.textValue(this.idStem!)
      out.int8Value(this.idLow)
      out.int8Value(this.idHigh)
    } else for (let i = 0; i < 3; i++) out.null()
    if (this.givenIds.length === 0) {
      out.null()
      out.null()
    } else {
      out.texts(this.givenIds)
      out.int4s(this.givenPositions)
    }
    out.requestIds(this.madeCounts, this.idStem, this.givenIds)
    out.int8s(this.times)
    out.uuids(this.tenants)
    out.uuids(this.keys)
    out.texts(this.methods)
    out.texts(this.routes)
    out.texts(this.paths)
    out.int2s(this.statuses)
    out.texts(this.codes, this.codeless)
    out.int8s(this.durations)
    out.int8s(this.requestBytes)
    out.int8s(this.responseBytes)
    out.texts(this.ips)
    out.int4s(this.costs)
    if (this.reported) out.texts(this.units, true)
    else out.null()
    if (this.shadowed) out.texts(this.wouldRefuse, true)
    else out.null()
    if (this.cut) out.texts(this.outcomes, true)
    else out.null()
    if (this.celled) out.texts(this.cells, true)
    else out.null()
    if (this.traced) out.texts(this.traceIds, true)
    else out.null()
  }
}
