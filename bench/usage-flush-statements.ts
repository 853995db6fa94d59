// Does the usage flush leave memory behind, in the gateway or in Postgres? postgres.js prepares
// every statement and keeps it per connection, keyed by its text, and Postgres keeps it in that
// connection's backend: a flush whose text changed with its row count would add a statement on
// both sides for every new count. This flushes BENCH_FLUSHES times on one connection with addUsage
// (src/store/usage.ts), always 500 rows ("fixed") and then 1, 2, 3 … rows ("varying"), and prints
// what the heap after a full GC and the backend's private memory (RssAnon, Linux, same machine) grew by.
//   npx tsx --expose-gc bench/usage-flush-statements.ts
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import postgres from 'postgres'
import { migrate } from '../src/store/migrate.js'
import { addUsage } from '../src/store/usage.js'
import { createDatabase, envInt, run } from './lib.js'

const FLUSHES = envInt('BENCH_FLUSHES', 1000)
const gc = (globalThis as { gc?: () => void }).gc

async function main(): Promise<void> {
  if (gc === undefined)
    throw new Error('run with node --expose-gc (npx tsx --expose-gc bench/usage-flush-statements.ts)')
  const db = await createDatabase('flush')
  const sql = postgres(db.url, { max: 1, onnotice: () => {} })
  try {
    await migrate(sql)
    const tenants = (
      await sql<
        { id: string }[]
      >`insert into tenants (name) select 'flush ' || n from generate_series(1, 1000) as n returning id`
    ).map((r) => r.id)
    const [{ pid }] = (await sql<{ pid: number }[]>`select pg_backend_pid() as pid`) as unknown as [{ pid: number }]
    const backendMb = () => Number(/RssAnon:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024
    const heapMb = () => {
      gc!()
      gc!()
      return process.memoryUsage().heapUsed / 2 ** 20
    }
    for (const mode of ['fixed', 'varying'] as const) {
      const [heap, backend, started] = [heapMb(), backendMb(), performance.now()]
      for (let i = 0; i < FLUSHES; i++) {
        const rows = tenants.slice(0, mode === 'fixed' ? 500 : (i % tenants.length) + 1)
        await addUsage(sql, randomUUID(), {
          counts: rows.map((tenantId) => ({ tenantId, day: '2020-01-01', statusClass: 2, requests: 1 })),
        })
      }
      console.log(
        `${mode.padEnd(7)}  ${FLUSHES} flushes in ${((performance.now() - started) / 1000).toFixed(1)} s; ` +
          `heap +${(heapMb() - heap).toFixed(1)} MB, Postgres backend private memory +${(backendMb() - backend).toFixed(1)} MB`,
      )
    }
  } finally {
    await sql.end()
    await db.drop()
  }
}

run(main)
