// The usage export and reconciliation at the size of a real account: BENCH_SUBS sub-accounts (10^4)
// under one parent, each with units of two meters (requests, tokens) in BENCH_HOURS periods of
// each day of a 30-day month, all closed. Measures, on the local Postgres:
// - reconciliation of the month (store/usage-reconciliation.ts and usage/reconciliation.ts; the
//   request log holds none of it, as with its default 7 days) against the 5 s the issue asks;
// - the pull (store/usage-periods.ts exportRows, as ndjson) in events a minute;
// - the push (usage/exporter.ts) to bench/servers.js's receiver, for BENCH_PUSH_SECONDS, in
//   events a minute; both against 10^5.
//   npx tsx bench/usage-export.ts
import postgres from 'postgres'
import pino from 'pino'
import { migrate } from '../src/store/migrate.js'
import { exportRows } from '../src/store/usage-periods.js'
import { reconciliationCounts } from '../src/store/usage-reconciliation.js'
import { exportText } from '../src/usage/export.js'
import { UsageExporter } from '../src/usage/exporter.js'
import { reconcile } from '../src/usage/reconciliation.js'
import { createDatabase, envInt, fmt, median, reportHead, run, startReceiver, stopChild } from './lib.js'

const secs = (n: number, digits = 2) => n.toFixed(digits)

const SUBS = envInt('BENCH_SUBS', 10_000)
const HOURS = envInt('BENCH_HOURS', 4)
const ROUNDS = envInt('BENCH_ROUNDS', 3)
/** A pull of the month takes about two minutes. */
const PULL_ROUNDS = envInt('BENCH_PULL_ROUNDS', 1)
const PUSH_SECONDS = envInt('BENCH_PUSH_SECONDS', 30)
const MONTH = Date.parse('2026-10-01T00:00:00Z')
const DAYS = 30
const SECRET = `whsec_${Buffer.alloc(32, 3).toString('base64')}`

async function main(): Promise<void> {
  console.log(reportHead('bench/usage-export.ts').join('\n'))
  const db = await createDatabase('export')
  const sql = postgres(db.url, { max: 4, onnotice: () => {}, connection: { max_parallel_workers_per_gather: '0' } })
  const receiver = await startReceiver()
  try {
    await migrate(sql)
    const seeded = performance.now()
    const [parent] = await sql<{ id: string }[]>`insert into tenants (name) values ('bench parent') returning id`
    await sql`insert into tenants (name, parent_id) select 'sub ' || i, ${parent!.id} from generate_series(1, ${SUBS}) as i`
    // Each sub-account's periods: HOURS a day, spread over the day by its place.
    for (const [table, columns, values] of [
      ['usage_period_units', 'units, requests', 'u.units, u.requests'],
      ['usage_period_checks', 'served_units, limiter_units', 'u.units, u.units'],
    ] as const)
      await sql.unsafe(`
        insert into ${table} (tenant_id, period_start, meter, ${columns})
        select t.id, to_timestamp(${MONTH / 1000} + d * 86400 + ((t.seq + h * 5) % 24) * 3600), m.meter, ${values}
        from tenants t cross join generate_series(0, ${DAYS - 1}) as d cross join generate_series(0, ${HOURS - 1}) as h
          cross join (values ('requests', 3, 1), ('tokens', 1200, 1)) as m (meter, units_each, n)
          cross join lateral (select m.units_each * (1 + t.seq % 7) as units, 1 + t.seq % 7 as requests) as u
        where t.parent_id = '${parent!.id}'`)
    await sql`update usage_close set closed_until = ${new Date(MONTH + DAYS * 86_400_000)}, period_seconds = 3600`
    await sql`vacuum analyze`
    const [{ rows }] = (await sql`select count(*)::int as rows from usage_period_units`) as unknown as [
      { rows: number },
    ]
    console.log(
      `seeded ${fmt(rows)} records (${SUBS} sub-accounts × ${DAYS} days × ${HOURS} periods × 2 meters) in ${secs((performance.now() - seeded) / 1000, 1)} s`,
    )

    const range = { from: new Date(MONTH), to: new Date(MONTH + DAYS * 86_400_000), accountId: parent!.id }
    const reconciled: number[] = []
    let entries = 0
    for (let round = 0; round < ROUNDS; round++) {
      const started = performance.now()
      entries = reconcile(
        await reconciliationCounts(sql, { ...range, closedUntil: range.to, pushTarget: null }),
        null,
      ).length
      reconciled.push((performance.now() - started) / 1000)
    }
    console.log(
      `reconciliation of the month: ${entries} entries, median ${secs(median(reconciled), 2)} s of ${ROUNDS} (target ≤ 5 s): ${reconciled.map((s) => secs(s, 2)).join(', ')}`,
    )

    const pulled: number[] = []
    for (let round = 0; round < PULL_ROUNDS; round++) {
      const started = performance.now()
      let bytes = 0
      for await (const text of exportText(exportRows(sql, range), {
        format: 'ndjson',
        periodSeconds: 3600,
        source: 'https://bench',
      }))
        bytes += text.length
      pulled.push((rows / ((performance.now() - started) / 1000)) * 60)
      if (bytes === 0) throw new Error('the pull exported nothing')
    }
    console.log(
      `pull (ndjson): median ${fmt(median(pulled))} events a minute of ${PULL_ROUNDS} (target ≥ 100,000): ${pulled.map((n) => fmt(n)).join(', ')}`,
    )

    const exporter = new UsageExporter({
      sql,
      log: pino({ level: 'silent' }),
      url: `${receiver.url}/hooks`,
      secret: SECRET,
      source: 'https://bench',
      periodSeconds: 3600,
      retrySchedule: [1_000],
      intervalMs: 1_000,
    })
    const before = (await receiver.received()).total
    const started = performance.now()
    await exporter.tick()
    exporter.start()
    await new Promise((done) => setTimeout(done, PUSH_SECONDS * 1000))
    await exporter.stop()
    const seconds = (performance.now() - started) / 1000
    const [{ acknowledged }] = (await sql`
      select count(*)::int as acknowledged from usage_period_units u, usage_export_cursors c
      where (u.period_start, u.tenant_id, u.meter) <= (c.period_start, c.tenant_id, c.meter)`) as unknown as [
      { acknowledged: number },
    ]
    const batches = (await receiver.received()).total - before
    console.log(
      `push: ${fmt(acknowledged)} events acknowledged in ${batches} batches in ${secs(seconds, 1)} s: ${fmt((acknowledged / seconds) * 60)} events a minute (target ≥ 100,000)`,
    )
  } finally {
    await sql.end()
    await stopChild(receiver.child)
    await db.drop()
  }
}

run(main)
