// What Postgres says about this process's connections, for the pool-use metric
// (tgw_postgres_connections, docs/operations.md).
import { withDeadline, type Store } from './db.js'

/** This process's connections by state, as Postgres reports them (the scrape's own included). */
export async function connectionsByState(store: Store): Promise<Record<string, number> | null> {
  const pool = store.pool
  if (pool === undefined) return null
  const rows = await withDeadline(
    store.sql<{ state: string | null; n: number }[]>`
      select state, count(*)::int as n from pg_stat_activity
      where application_name = ${pool.applicationName} group by state`,
    1000,
  )
  return Object.fromEntries(rows.map((row) => [row.state ?? 'unknown', row.n]))
}
