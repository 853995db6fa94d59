// Records into the request log's rows (schema.ts): grouped by parent and day in arrival order, up
// to ROW_RECORDS a row, each field an array in Postgres's text form. The writer sends the rows as
// one JSON parameter; Postgres reads each array with its type's own input, the cheapest of the
// ways tried (bench/README.md, the request log).
import { dayOfRecord, micros } from './partitions.js'
import type { RequestRecord } from './record-buffer.js'
import { ROW_RECORDS } from './schema.js'

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
}

/** A request id the gateway made (http/guards.ts): a UUID's first 24 characters, then 12 hex digits counting. */
const MADE_ID = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-)([0-9a-f]{12})$/

/** The stem and the count of a request id of the gateway's shape; null for any other. */
export function madeIdParts(id: string): { stem: string; count: number } | null {
  const match = MADE_ID.exec(id)
  return match === null ? null : { stem: match[1]!, count: Number.parseInt(match[2]!, 16) }
}

/** Characters that an array element must be quoted for (Postgres, "Array Value Input"). */
const SPECIAL = /[{},"\\\s]/
/** What Postgres text cannot hold (NUL), and what JSON cannot carry (a lone surrogate). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is looked for
const UNKEEPABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g
/** Text with none of either (nor any surrogate): almost every id, method, route, path and address. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is looked for
const PLAIN = /^[^{},"\\\s\u0000\ud800-\udfff]+$/

/** `NULL` in any case, which an array literal would read as SQL's NULL unless quoted. */
const isNullWord = (text: string) => text.length === 4 && text.toLowerCase() === 'null'

/** A text element of an array literal: quoted only when it must be (most never are). */
function element(text: string): string {
  // One test for the common case, rather than a replace and a test.
  if (PLAIN.test(text) && !isNullWord(text)) return text
  // One such character would fail its whole batch, retried until dropped: it is kept as U+FFFD.
  text = text.replace(UNKEEPABLE, '\ufffd')
  if (!SPECIAL.test(text) && text.length !== 0 && !isNullWord(text)) return text
  return `"${text.replace(/["\\]/g, '\\$&')}"`
}

function arrayOf(elements: readonly (string | number)[]): string {
  return `{${elements.join(',')}}`
}

/** Builds one row's arrays as records come, in order. */
class RowBuilder {
  readonly ids: string[] = []
  readonly times: number[] = []
  readonly tenants: string[] = []
  readonly keys: string[] = []
  readonly methods: string[] = []
  readonly routes: string[] = []
  readonly paths: string[] = []
  readonly statuses: number[] = []
  readonly codes: string[] = []
  readonly durations: number[] = []
  readonly requestBytes: number[] = []
  readonly responseBytes: number[] = []
  readonly ips: string[] = []
  readonly tenantSet = new Set<string>()
  readonly keySet = new Set<string>()
  readonly routeSet = new Set<string>()
  readonly statusSet = new Set<number>()
  readonly codeSet = new Set<string>()
  readonly refusedTenantSet = new Set<string>()
  readonly refusedKeySet = new Set<string>()
  readonly givenIds: string[] = []
  readonly givenPositions: number[] = []
  first = Number.POSITIVE_INFINITY
  last = Number.NEGATIVE_INFINITY
  not2xx = false
  idStem: string | null = null
  idLow = Number.POSITIVE_INFINITY
  idHigh = Number.NEGATIVE_INFINITY

  constructor(readonly accountId: string) {}

  add(record: RequestRecord): void {
    const count = record.idGiven ? Number.NaN : this.madeCount(record.id)
    if (Number.isNaN(count)) {
      const id = element(record.id)
      this.givenIds.push(id)
      this.givenPositions.push(this.ids.length + 1)
      this.ids.push(id)
    } else {
      this.idLow = Math.min(this.idLow, count)
      this.idHigh = Math.max(this.idHigh, count)
      // A made id is hex digits and dashes: nothing to quote.
      this.ids.push(record.id)
    }
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
    this.methods.push(element(record.method))
    const route = element(record.route)
    this.routes.push(route)
    this.routeSet.add(route)
    this.paths.push(element(record.path))
    this.statuses.push(record.status)
    this.statusSet.add(record.status)
    if (record.status < 200 || record.status > 299) {
      this.not2xx = true
      this.refusedTenantSet.add(record.tenantId)
      this.refusedKeySet.add(record.keyId)
    }
    if (record.code === null) this.codes.push('NULL')
    else {
      const code = element(record.code)
      this.codes.push(code)
      this.codeSet.add(code)
    }
    this.durations.push(micros(record.durationMs))
    this.requestBytes.push(record.requestBytes)
    this.responseBytes.push(record.responseBytes)
    this.ips.push(element(record.sourceIp))
  }

  /** The count of an id the gateway made with this row's stem (the first such id sets it); NaN for any other. */
  private madeCount(id: string): number {
    if (this.idStem === null) {
      const made = madeIdParts(id)
      if (made === null) return Number.NaN
      this.idStem = made.stem
      return made.count
    }
    // The row's later ids: the same stem, then 12 hex digits (`0x` makes Number refuse any other).
    return id.length === 36 && id.startsWith(this.idStem) ? Number(`0x${id.slice(24)}`) : Number.NaN
  }

  get size(): number {
    return this.ids.length
  }

  row(): LogRow {
    const made = this.idLow <= this.idHigh
    return {
      account_id: this.accountId,
      first_us: this.first,
      last_us: this.last,
      records: this.ids.length,
      tenant_set: arrayOf([...this.tenantSet]),
      key_set: arrayOf([...this.keySet]),
      route_set: arrayOf([...this.routeSet]),
      status_set: arrayOf([...this.statusSet]),
      code_set: arrayOf([...this.codeSet]),
      not_2xx: this.not2xx,
      refused_tenant_set: arrayOf([...this.refusedTenantSet]),
      refused_key_set: arrayOf([...this.refusedKeySet]),
      id_stem: made ? this.idStem : null,
      id_low: made ? this.idLow : null,
      id_high: made ? this.idHigh : null,
      given_ids: this.givenIds.length === 0 ? null : arrayOf(this.givenIds),
      given_positions: this.givenPositions.length === 0 ? null : arrayOf(this.givenPositions),
      ids: arrayOf(this.ids),
      times_us: arrayOf(this.times),
      tenant_ids: arrayOf(this.tenants),
      key_ids: arrayOf(this.keys),
      methods: arrayOf(this.methods),
      routes: arrayOf(this.routes),
      paths: arrayOf(this.paths),
      statuses: arrayOf(this.statuses),
      codes: arrayOf(this.codes),
      durations_us: arrayOf(this.durations),
      request_bytes: arrayOf(this.requestBytes),
      response_bytes: arrayOf(this.responseBytes),
      source_ips: arrayOf(this.ips),
    }
  }
}

/**
 * The rows of a batch, made as its records are added: a row per parent and day (and per
 * ROW_RECORDS), each in arrival order.
 */
export class BatchRows {
  private readonly rows: LogRow[] = []
  private readonly open = new Map<string, RowBuilder>()

  constructor(private readonly rowRecords = ROW_RECORDS) {}

  add(record: RequestRecord): void {
    const group = `${record.accountId}/${dayOfRecord(record.timeMs)}`
    let builder = this.open.get(group)
    if (builder === undefined) {
      builder = new RowBuilder(record.accountId)
      this.open.set(group, builder)
    }
    builder.add(record)
    if (builder.size === this.rowRecords) {
      this.rows.push(builder.row())
      this.open.delete(group)
    }
  }

  /** Every row, those still open included. */
  finish(): LogRow[] {
    for (const builder of this.open.values()) this.rows.push(builder.row())
    this.open.clear()
    return this.rows
  }
}
