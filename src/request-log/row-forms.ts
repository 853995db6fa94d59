// A request log row (rows.ts) written out: to a real Postgres as a tuple of a binary COPY
// (copy-format.ts), whose values Postgres stores without parsing them; to the embedded PGlite,
// which takes no COPY from a client, as one JSON parameter of arrays in Postgres's text form
// (bench/README.md, the request log). Both in the order of the row's columns.
import { arrayOf, element, nullableTexts } from './array-literals.js'
import type { CopyBuffer } from './copy-format.js'
import type { RowBuilder } from './rows.js'
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

/** The columns a row is written to (schema.ts), in the order of LogRow and of encodeRow's fields. */
export const ROW_COLUMNS = `account_id, first_time, last_time, records, tenant_set, key_set, route_set, status_set,
  code_set, not_2xx, refused_tenant_set, refused_key_set, id_stem, id_low, id_high, given_ids, given_positions,
  ${RECORD_ARRAYS}, ${UNIT_ARRAYS}, ${SHADOW_ARRAYS}, ${OUTCOME_ARRAYS}, ${CELL_ARRAYS}, ${TRACE_ARRAYS}`
const COPY_FIELDS = ROW_COLUMNS.split(',').length

/** The row as the JSON insert reads it: each array in Postgres's text form. */
export function rowText(row: RowBuilder): LogRow {
  const made = row.idLow <= row.idHigh
  const texts = (values: Iterable<string>) => arrayOf(Array.from(values, element))
  return {
    account_id: row.accountId,
    first_us: row.first,
    last_us: row.last,
    records: row.size,
    tenant_set: arrayOf([...row.tenantSet]),
    key_set: arrayOf([...row.keySet]),
    route_set: texts(row.routeSet),
    status_set: arrayOf([...row.statusSet]),
    code_set: texts(row.codeSet),
    not_2xx: row.not2xx,
    refused_tenant_set: arrayOf([...row.refusedTenantSet]),
    refused_key_set: arrayOf([...row.refusedKeySet]),
    id_stem: made ? row.idStem : null,
    id_low: made ? row.idLow : null,
    id_high: made ? row.idHigh : null,
    given_ids: row.givenIds.length === 0 ? null : texts(row.givenIds),
    given_positions: row.givenPositions.length === 0 ? null : arrayOf(row.givenPositions),
    ids: texts(row.ids()),
    times_us: arrayOf(row.times),
    tenant_ids: arrayOf(row.tenants),
    key_ids: arrayOf(row.keys),
    methods: texts(row.methods),
    routes: texts(row.routes),
    paths: texts(row.paths),
    statuses: arrayOf(row.statuses),
    codes: nullableTexts(row.codes),
    durations_us: arrayOf(row.durations),
    request_bytes: arrayOf(row.requestBytes),
    response_bytes: arrayOf(row.responseBytes),
    source_ips: texts(row.ips),
    costs: arrayOf(row.costs),
    units: row.reported ? nullableTexts(row.units) : null,
    would_refuse: row.shadowed ? nullableTexts(row.wouldRefuse) : null,
    outcomes: row.cut ? nullableTexts(row.outcomes) : null,
    cells: row.celled ? nullableTexts(row.cells) : null,
    trace_ids: row.traced ? nullableTexts(row.traceIds) : null,
  }
}

/** The row as a tuple of the binary COPY, its fields in the order of ROW_COLUMNS. */
export function encodeRow(row: RowBuilder, out: CopyBuffer): void {
  const made = row.idLow <= row.idHigh
  out.tuple(COPY_FIELDS)
  out.uuidValue(row.accountId)
  out.timestampValue(row.first)
  out.timestampValue(row.last)
  out.int4Value(row.size)
  out.uuids([...row.tenantSet])
  out.uuids([...row.keySet])
  out.texts([...row.routeSet])
  out.int2s([...row.statusSet])
  out.texts([...row.codeSet])
  out.boolValue(row.not2xx)
  out.uuids([...row.refusedTenantSet])
  out.uuids([...row.refusedKeySet])
  if (made) {
    out.textValue(row.idStem!)
    out.int8Value(row.idLow)
    out.int8Value(row.idHigh)
  } else for (let i = 0; i < 3; i++) out.null()
  if (row.givenIds.length === 0) {
    out.null()
    out.null()
  } else {
    out.texts(row.givenIds)
    out.int4s(row.givenPositions)
  }
  out.requestIds(row.madeCounts, row.idStem, row.givenIds)
  out.int8s(row.times)
  out.uuids(row.tenants)
  out.uuids(row.keys)
  out.texts(row.methods)
  out.texts(row.routes)
  out.texts(row.paths)
  out.int2s(row.statuses)
  out.texts(row.codes, row.codeless)
  out.int8s(row.durations)
  out.int8s(row.requestBytes)
  out.int8s(row.responseBytes)
  out.texts(row.ips)
  out.int4s(row.costs)
  if (row.reported) out.texts(row.units, true)
  else out.null()
  if (row.shadowed) out.texts(row.wouldRefuse, true)
  else out.null()
  if (row.cut) out.texts(row.outcomes, true)
  else out.null()
  if (row.celled) out.texts(row.cells, true)
  else out.null()
  if (row.traced) out.texts(row.traceIds, true)
  else out.null()
}
