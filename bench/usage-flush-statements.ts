// Does the usage flush leave memory behind in the gateway and in Postgres? Run by hand (issue 6):
//   npx tsx --expose-gc bench/usage-flush-statements.ts       (env: BENCH_DATABASE_URL, BENCH_FLUSHES=1000)
// postgres.js prepares every statement and keeps it, per connection, for the connection's life
// (30–60 min by default), keyed by its text; Postgres keeps it in that connection's backend.
// addUsage (src/store/usage.ts) writes one multi-row VALUES list, so its text differs with the
// number of rows: a flush of a row count not seen before on that connection is one more
// statement on both sides. This flushes BENCH_FLUSHES times on one connection, three ways:
//   fixed   addUsage, always 500 rows (one statement text)
//   varying addUsage, 1, 2, 3 … rows (a new statement text each time)
//   unnest  the proposed statement (arrays + unnest, one text whatever the row count), 1, 2, 3 … rows
// and prints how much the gateway's heap (after a full GC) and the Postgres backend's private
// memory (RssAnon in /proc, Linux only, same machine) grew. A scratch database is created and dropped.
import { randomBytes, randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import postgres from 'postgres'
import { migrate } from '../src/store/migrate.js'
import { addUsage, type UsageCount } from '../src/store/usage.js'
import { ADMIN_URL, positiveInt } from './lib.js'

const FLUSHES = positiveInt('BENCH_FLUSHES', 1000)

const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error('run with node --expose-gc (npx tsx --expose-gc bench/usage-flush-statements.ts)')

/** The proposed addUsage statement: the same text for any number of rows. */
async function addUsageUnnest(sql: postgres.Sql, batchId: string, counts: readonly UsageCount[]): Promise<boolean> {
  return sql.begin(async (tx) => {
    const recorded = await tx`insert into usage_batches (id) values (${batchId}) on conflict (id) do nothing returning id`
    if (recorded.length === 0) return false
    await tx`
      insert into usage_daily (tenant_id, day, status_class, requests)
      select tenant_id, day, status_class, requests
      from unnest(${tx.array(counts.map((c) => c.tenantId))}::uuid[], ${tx.array(counts.map((c) => c.day))}::date[],
                  ${tx.array(counts.map((c) => c.statusClass))}::smallint[], ${tx.array(counts.map((c) => c.requests))}::bigint[])
        with ordinality as row (tenant_id, day, status_class, requests, n)
      order by n
      on conflict (tenant_id, day, status_class)
      do update set requests = usage_daily.requests + excluded.requests`
    await tx`delete from usage_batches where flushed_at < now() - '1 day'::interval`
    return true
  })
}

async function run(url: string, mode: 'fixed' | 'varying' | 'unnest', tenants: string[]): Promise<string> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  try {
    const [row] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`
    const backendMb = () => Number(/RssAnon:\s+(\d+)/.exec(readFileSync(`/proc/${row!.pid}/status`, 'utf8'))?.[1] ?? Number.NaN) / 1024
    const heapMb = () => {
      gc!()
      gc!()
      return process.memoryUsage().heapUsed / 2 ** 20
    }
    const [heap0, backend0] = [heapMb(), backendMb()]
    const started = performance.now()
    for (let i = 1; i <= FLUSHES; i++) {
      const n = mode === 'fixed' ? 500 : ((i - 1) % tenants.length) + 1
      const counts = tenants.slice(0, n).map((tenantId) => ({ tenantId, day: '2020-01-01', statusClass: 2, requests: 1 }))
      if (mode === 'unnest') await addUsageUnnest(sql, randomUUID(), counts)
      else await addUsage(sql, randomUUID(), counts)
    }
    const seconds = (performance.now() - started) / 1000
    const [total] = await sql<{ n: string }[]>`select coalesce(sum(requests), 0)::text as n from usage_daily`
    await sql`delete from usage_daily`
    return (
      `${mode.padEnd(7)}  ${FLUSHES} flushes in ${seconds.toFixed(1)} s; gateway heap +${(heapMb() - heap0).toFixed(1)} MB; ` +
      `Postgres backend private memory +${(backendMb() - backend0).toFixed(1)} MB; ${total!.n} requests counted`
    )
  } finally {
    await sql.end()
  }
}

async function main(): Promise<void> {
  const dbName = `tgw_flush_${randomBytes(4).toString('hex')}`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  const url = new URL(ADMIN_URL)
  url.pathname = `/${dbName}`
  await admin.unsafe(`create database ${dbName}`)
  try {
    const sql = postgres(url.toString(), { max: 1, onnotice: () => {} })
    let tenants: string[]
    try {
      await migrate(sql)
      const rows = await sql<{ id: string }[]>`
        insert into tenants (name) select 'flush ' || n from generate_series(1, 1000) as n returning id`
      tenants = rows.map((r) => r.id)
    } finally {
      await sql.end()
    }
    for (const mode of ['fixed', 'varying', 'unnest'] as const) console.log(await run(url.toString(), mode, tenants))
  } finally {
    await admin.unsafe(`drop database if exists ${dbName} with (force)`)
    await admin.end()
  }
}

await main()
