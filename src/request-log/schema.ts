// The request log's table (docs/operations.md, the request log), made by the gateway itself
// rather than by a numbered migration: REQUEST_LOG_DATABASE_URL may put it in a Postgres that
// holds nothing else of the gateway's. Partitioned by day, so that retention drops whole
// partitions instead of deleting rows.
//
// A row holds up to ROW_RECORDS records of one parent and one day, column by column in arrays,
// with a summary of what they hold (bench/README.md, the request log): a row and its index entries
// a record cost Postgres 9-15 µs of CPU, on the proxy's own cores; a row of 500 costs 2-3 µs a
// record. Queries (queries.ts) walk an account's rows newest first, pass over a row whose summary
// cannot match, and read the arrays of the rest.
import type { Sql, Tx } from '../store/db.js'
import { ACCOUNT_IDS_FUNCTION, ACCOUNT_IDS_INDEX, ensureAccountIdsFunction } from './account-ids-index.js'
import { SCHEMA_LOCK } from './partitions.js'

/** At most this many records a row: reading a record's fields decompresses its row's arrays. */
export const ROW_RECORDS = 500

/**
 * A record's place in the log, as the API's cursors carry it: its row's seq times this, plus its
 * 1-based position in the row (under ROW_RECORDS, so under this).
 */
export const POSITIONS_PER_ROW = 65_536

/** The record columns, in the order of the arrays (writer.ts) and of `unnest` (queries.ts). */
export const RECORD_ARRAYS = `ids, times_us, tenant_ids, key_ids, methods, routes, paths, statuses, codes,
  durations_us, request_bytes, response_bytes, source_ips`

/**
 * The units of each record (docs/api.md, Units), added after the columns above: null in rows
 * written before them (and in those converted from the old log). `units` is null for a whole row
 * whose records reported none, as most rows are.
 */
export const UNIT_ARRAYS = 'costs, units'

/**
 * The shadow limits that would have refused each record (docs/api.md, Shadow limits), their
 * policies joined by commas; added after the unit columns, and null for a whole row of records
 * none would have refused, as most rows are.
 */
export const SHADOW_ARRAYS = 'would_refuse'

/**
 * How each record's exchange ended (capture.ts, RequestOutcome), added after the shadow column:
 * null for `completed`, and for a whole row of records that all ended whole, as most rows are.
 * Text rather than an enum: later kinds of ending add values without a change of the table.
 */
export const OUTCOME_ARRAYS = 'outcomes'

/**
 * The cell that served each record (docs/api.md, Cells), added after the outcomes: null for none,
 * and for a whole row of records of no cell, as every row is on a gateway without cells.
 */
export const CELL_ARRAYS = 'cells'

/**
 * Each record's trace id (docs/operations.md, Traces), added after the outcomes: null for a whole
 * row of records that were not traced, as every row is with tracing off.
 */
export const TRACE_ARRAYS = 'trace_ids'

/**
 * The table and its indexes, each by its name: a start makes those missing only (below). A
 * `create index if not exists` of an index that exists still locks the table and every partition
 * for a moment, and waits behind a partition's index being built (account-ids-index.ts) while every
 * write waits behind it. An index added to an existing log is declared `on only` and built in the
 * background, as that one is: a plain one would build on every partition with all writes waiting.
 */
const tableObjects = (compression: string, firstSeq: string): [name: string, statement: string][] => [
  [
    'request_log_rows',
    `
  create table request_log_rows (
    -- Insertion order: pages walk it newest first and never skip or repeat a record.
    seq             bigint generated always as identity (start with ${firstSeq}),
    account_id      uuid not null,
    first_time      timestamptz not null,
    last_time       timestamptz not null,
    records         int not null,
    -- What the records hold, each value once: a filter passes over the rows that lack its value
    -- without reading their arrays.
    tenant_set      uuid[] not null,
    key_set         uuid[] not null,
    route_set       text[] not null,
    status_set      int2[] not null,
    code_set        text[] not null,
    not_2xx         boolean not null,
    -- The sub-accounts and keys of the records that are not 2xx: a sub-account's refusals are
    -- found among the rows that hold some, not among all its rows that hold anyone's.
    refused_tenant_set uuid[] not null,
    refused_key_set    uuid[] not null,
    -- The request ids the gateway made (a process's stem and a counter: http/guards.ts) as the
    -- stem and the counters' range; ids clients sent in X-Request-Id, and their positions, apart.
    id_stem         text,
    id_low          bigint,
    id_high         bigint,
    given_ids       text[],
    given_positions int4[],
    -- The records, one array a field, in arrival order; lz4 where the server has it, ten times
    -- faster than pglz (an embedded PGlite has not). Times and durations in whole microseconds:
    -- an integer is written and read faster than a float.
    ids             text[] ${compression} not null,
    times_us        int8[] ${compression} not null,
    tenant_ids      uuid[] ${compression} not null,
    key_ids         uuid[] ${compression} not null,
    methods         text[] ${compression} not null,
    routes          text[] ${compression} not null,
    paths           text[] ${compression} not null,
    statuses        int2[] ${compression} not null,
    codes           text[] ${compression} not null,
    durations_us    int8[] ${compression} not null,
    request_bytes   int8[] ${compression} not null,
    response_bytes  int8[] ${compression} not null,
    source_ips      text[] ${compression} not null,
    -- Each record's route cost (0: a management request), negative when the gateway refused the
    -- request before its upstream (it counted no units), and the units its upstream reported as
    -- JSON (null: none).
    costs           int4[] ${compression},
    units           text[] ${compression},
    would_refuse    text[] ${compression},
    outcomes        text[] ${compression},
    cells           text[] ${compression},
    trace_ids       text[] ${compression}
  ) partition by range (first_time)`,
  ],
  [
    'request_log_rows_pages',
    'create index request_log_rows_pages on request_log_rows (account_id, seq) include (first_time, last_time)',
  ],
  // The answers that are not 2xx are a few in a hundred: a filter on them walks these rows only.
  [
    'request_log_rows_not_2xx',
    'create index request_log_rows_not_2xx on request_log_rows (account_id, seq) where not_2xx',
  ],
  ['request_log_rows_tenants', 'create index request_log_rows_tenants on request_log_rows using gin (tenant_set)'],
  ['request_log_rows_keys', 'create index request_log_rows_keys on request_log_rows using gin (key_set)'],
  // A route, a status or a code that matches nothing (any parent may ask for one) is answered by
  // an index, not by a read of all the account's rows.
  ['request_log_rows_routes', 'create index request_log_rows_routes on request_log_rows using gin (route_set)'],
  ['request_log_rows_statuses', 'create index request_log_rows_statuses on request_log_rows using gin (status_set)'],
  [
    'request_log_rows_codes',
    'create index request_log_rows_codes on request_log_rows using gin (code_set) where not_2xx',
  ],
  [
    'request_log_rows_refused_tenants',
    'create index request_log_rows_refused_tenants on request_log_rows using gin (refused_tenant_set) where not_2xx',
  ],
  [
    'request_log_rows_refused_keys',
    'create index request_log_rows_refused_keys on request_log_rows using gin (refused_key_set) where not_2xx',
  ],
  [
    'request_log_rows_made_ids',
    `create index request_log_rows_made_ids on request_log_rows (account_id, id_stem, id_high) include (id_low)
      where id_stem is not null`,
  ],
  // A client's ids keyed by their account (account-ids-index.ts), so that a lookup reads its own
  // parent's rows only. \`on only\`: valid at once on a log without partitions; on one with them,
  // built in the background.
  [
    ACCOUNT_IDS_INDEX,
    `create index ${ACCOUNT_IDS_INDEX} on only request_log_rows
      using gin (${ACCOUNT_IDS_FUNCTION}(account_id, given_ids)) where given_ids is not null`,
  ],
]

/** A record a row, as SQL over the log reads best (tests, an operator's psql); the API reads the rows. */
export const CREATE_VIEW = `
  create or replace view request_log as
  select r.seq * ${POSITIONS_PER_ROW} + f.position as seq, f.id, to_timestamp(f.time_us / 1e6) as time,
    r.account_id, f.tenant_id, f.key_id, f.method, f.route, f.path, f.status, f.code,
    (f.duration_us / 1e3)::float8 as duration_ms, f.request_bytes, f.response_bytes, f.source_ip
  from request_log_rows r cross join lateral unnest(${RECORD_ARRAYS}) with ordinality
    as f(id, time_us, tenant_id, key_id, method, route, path, status, code, duration_us, request_bytes,
      response_bytes, source_ip, position)`

export async function ensureRequestLogTable(sql: Sql): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${SCHEMA_LOCK})`
    const [lz4] = await tx<{ ok: boolean }[]>`
      select 'lz4' = any(enumvals) as ok from pg_settings where name = 'default_toast_compression'`
    // The rows begin after the seqs of a log of a row a record, which keeps its own (conversion.ts).
    const old = await oldLogNextSeq(tx)
    await ensureAccountIdsFunction(tx)
    const objects = tableObjects(lz4?.ok === true ? 'compression lz4' : '', old ?? '1')
    const present = await tx<{ name: string }[]>`
      select relname as name from pg_class where relnamespace = to_regnamespace(current_schema())::oid
        and relname = any(${`{${objects.map(([name]) => name).join(',')}}`}::text[])`
    const made = new Set(present.map((row) => row.name))
    for (const [name, statement] of objects) if (!made.has(name)) await tx.unsafe(statement)
    await addUnitArrays(tx, lz4?.ok === true ? 'compression lz4' : '')
    await addArray(tx, 'would_refuse', lz4?.ok === true ? 'compression lz4' : '')
    await addArray(tx, 'outcomes', lz4?.ok === true ? 'compression lz4' : '')
    await addArray(tx, 'cells', lz4?.ok === true ? 'compression lz4' : '')
    await addArray(tx, 'trace_ids', lz4?.ok === true ? 'compression lz4' : '')
    if (old === null) await tx.unsafe(CREATE_VIEW)
  })
}

/**
 * The unit columns, on a log made before them. Only when missing: an ALTER locks the table and
 * every partition, even one that changes nothing. Nullable without a default, so Postgres writes
 * no row to add them.
 */
async function addUnitArrays(tx: Tx, compression: string): Promise<void> {
  const [present] = await tx<{ n: number }[]>`
    select count(*)::int as n from pg_attribute
    where attrelid = to_regclass('request_log_rows') and attname = 'costs' and not attisdropped`
  if (present!.n > 0) return
  await tx.unsafe(
    `alter table request_log_rows add column costs int4[] ${compression}, add column units text[] ${compression}`,
  )
}

/** A text column added later (the shadow limits', the outcomes, the cells, the trace ids), on a log made before it: only when missing, as the unit columns. */
async function addArray(
  tx: Tx,
  column: 'would_refuse' | 'outcomes' | 'cells' | 'trace_ids',
  compression: string,
): Promise<void> {
  const [present] = await tx<{ n: number }[]>`
    select count(*)::int as n from pg_attribute
    where attrelid = to_regclass('request_log_rows') and attname = ${column} and not attisdropped`
  if (present!.n > 0) return
  await tx.unsafe(`alter table request_log_rows add column ${column} text[] ${compression}`)
}

/**
 * With a log of a row a record still here (`request_log` as a table, before the rows held arrays:
 * conversion.ts moves it), the seq after its last; null when there is none.
 */
export async function oldLogNextSeq(tx: Sql | Tx): Promise<string | null> {
  const [old] = await tx<{ next: string }[]>`
    select coalesce(pg_sequence_last_value(pg_get_serial_sequence('request_log', 'seq')::regclass), 0) + 1 as next
    from pg_class where relname = 'request_log' and relkind = 'p'
      and relnamespace = to_regnamespace(current_schema())::oid`
  return old === undefined ? null : String(old.next)
}
