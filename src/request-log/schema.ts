// The request log's table (docs/operations.md, the request log), made by the gateway itself
// rather than by a numbered migration: REQUEST_LOG_DATABASE_URL may put it in a Postgres that
// holds nothing else of the gateway's. Partitioned by day, so that retention drops whole
// partitions instead of deleting rows; the indexes serve the API's filters, newest first.
import type { Sql } from '../store/db.js'

/** Held while a replica makes the table or a partition: two replicas starting together wait in turn. */
export const SCHEMA_LOCK = 7_346_120_019

export async function ensureRequestLogTable(sql: Sql): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${SCHEMA_LOCK})`
    await tx.unsafe(`
      create table if not exists request_log (
        -- Insertion order: pages walk it newest first and never skip or repeat a record.
        seq            bigint generated always as identity,
        id             text not null,
        time           timestamptz not null,
        account_id     uuid not null,
        tenant_id      uuid not null,
        key_id         uuid not null,
        method         text not null,
        route          text not null,
        path           text not null,
        status         smallint not null,
        code           text,
        duration_ms    real not null,
        request_bytes  bigint not null,
        response_bytes bigint not null,
        source_ip      text not null
      ) partition by range (time);
      -- Covering (time, route, status): a page of a time range, a route or a 2xx status finds its
      -- records in the index alone, skipping the others without reading the table (queries.ts).
      create index if not exists request_log_pages on request_log (account_id, seq) include (time, route, status);
      create index if not exists request_log_tenant on request_log (tenant_id, seq);
      create index if not exists request_log_key on request_log (key_id, seq);
      -- Only the answers that are not 2xx (a few in a hundred): each index costs Postgres 2-4 µs of
      -- CPU a record written (bench/README.md), and a 2xx filter is served by request_log_pages.
      create index if not exists request_log_not_2xx on request_log (account_id, (status / 100), seq)
        include (time, status) where status / 100 <> 2;
      create index if not exists request_log_code on request_log (account_id, code, seq) where code is not null;
      create index if not exists request_log_id on request_log (id);
    `)
  })
}
