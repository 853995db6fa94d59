// A log kept before the rows held arrays (a row a record, `request_log` a table) moved into rows
// (docs/operations.md, the request log): in the background once the gateway serves, a day's
// partition a transaction, oldest first, so that no start waits on it and a stop loses no more
// than the day under way (done again at the next start). Each row keeps the seq of its first
// record, below the new rows' (schema.ts starts them after the old log's last), so that pages stay
// newest first across both.
import type { FastifyBaseLogger } from 'fastify'
import { type Sql, type Tx, withoutTimeouts } from '../store/db.js'
import { ensurePartition } from './partitions.js'
import { CREATE_VIEW, oldLogNextSeq, RECORD_ARRAYS, ROW_RECORDS } from './schema.js'

/** Held while a replica converts a day: two replicas never convert the same one. */
const CONVERSION_LOCK = 7_346_120_020

/** Converts the whole old log, if there is one; the view takes its name at the end. */
export async function convertOldLog(sql: Sql, log: FastifyBaseLogger): Promise<void> {
  for (;;) {
    const partition = await oldestOldPartition(sql)
    if (partition === undefined) break
    // The new partitions of its days first, each in a short transaction of its own (the writer
    // makes partitions under the same lock), then the day itself.
    // Each reads or writes a whole day: without the pool's timeouts (store/db.ts), once.
    const days = await sql.begin(async (tx) => {
      await withoutTimeouts(tx)
      return tx<{ day: number }[]>`
        select distinct floor(extract(epoch from time) / 86400)::int as day from ${tx(partition)}`
    })
    for (const { day } of days) await ensurePartition(sql, day)
    await sql.begin(async (tx) => {
      await withoutTimeouts(tx)
      await tx`select pg_advisory_xact_lock(${CONVERSION_LOCK})`
      if ((await oldestOldPartition(tx)) !== partition) return
      await convertPartition(tx, partition)
    })
    log.info({ partition }, 'request log: a day of the old log converted into rows')
  }
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${CONVERSION_LOCK})`
    if ((await oldLogNextSeq(tx)) === null || (await oldestOldPartition(tx)) !== undefined) return
    await tx.unsafe(`drop table request_log; ${CREATE_VIEW}`)
  })
}

/** The old log's oldest partition by name (a day's), or undefined. */
async function oldestOldPartition(sql: Sql | Tx): Promise<string | undefined> {
  const [row] = await sql<{ name: string }[]>`
    select child.relname as name from pg_inherits
    join pg_class parent on parent.oid = pg_inherits.inhparent
    join pg_class child on child.oid = pg_inherits.inhrelid
    where parent.relname = 'request_log' and parent.relkind = 'p'
      and parent.relnamespace = to_regnamespace(current_schema())::oid
    order by child.relname limit 1`
  return row?.name
}

/**
 * One partition's records into rows of ROW_RECORDS of a parent and a day, in their order, each
 * row with the seq of its first record; their ids as sent by clients (which the gateway made is
 * not known). Then the partition goes.
 */
async function convertPartition(tx: Tx, partition: string): Promise<void> {
  const table = `"${partition.replaceAll('"', '""')}"`
  await tx.unsafe(`
    insert into request_log_rows (seq, account_id, first_time, last_time, records, tenant_set, key_set, route_set,
      status_set, code_set, not_2xx, refused_tenant_set, refused_key_set, given_ids, given_positions, ${RECORD_ARRAYS})
    overriding system value
    select min(seq), account_id, min(time), max(time), count(*), array_agg(distinct tenant_id),
      array_agg(distinct key_id), array_agg(distinct route), array_agg(distinct status),
      coalesce(array_agg(distinct code) filter (where code is not null), '{}'), bool_or(status / 100 <> 2),
      coalesce(array_agg(distinct tenant_id) filter (where status / 100 <> 2), '{}'),
      coalesce(array_agg(distinct key_id) filter (where status / 100 <> 2), '{}'),
      array_agg(distinct id), array_agg(position order by seq),
      array_agg(id order by seq), array_agg((extract(epoch from time) * 1e6)::int8 order by seq),
      array_agg(tenant_id order by seq), array_agg(key_id order by seq), array_agg(method order by seq),
      array_agg(route order by seq), array_agg(path order by seq), array_agg(status order by seq),
      array_agg(code order by seq), array_agg(round(duration_ms * 1e3)::int8 order by seq),
      array_agg(request_bytes order by seq), array_agg(response_bytes order by seq), array_agg(source_ip order by seq)
    from (select *, (n - 1) / ${ROW_RECORDS} as chunk, (n - 1) % ${ROW_RECORDS} + 1 as position
      from (select *, floor(extract(epoch from time) / 86400) as day,
        row_number() over (partition by account_id, floor(extract(epoch from time) / 86400) order by seq) as n
        from ${table}) numbered) records
    group by account_id, day, chunk;
    drop table ${table};`)
}
