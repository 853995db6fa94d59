// Usage counts cannot overflow (docs/billing.md, Bounds): a row's sum saturates at 2^53 − 1
// (USAGE_COUNT_MAX), even a row already past it (written before the bound, by hand), and another
// tenant's counts in the same flush land. A flush Postgres refuses for one row's data is split to
// find that row; the rest is written, the row is dropped and counted, and nothing is retried
// whole forever.
import { randomUUID } from 'node:crypto'
import { pino } from 'pino'
import t from 'tap'
import { USAGE_COUNT_MAX } from '../../src/store/usage-batch.js'
import { UsageMeter } from '../../src/usage/meter.js'
import { utcDay } from '../../src/usage/flush-rows.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'

const database = await freshDatabase(t)
const silent = pino({ level: 'silent' })
/** bigint's largest value: the finding's row sat just below it. */
const BIGINT_MAX = 9223372036854775807n

const units = (meter: string, n: number) => new Map([[meter, n]])

async function keyUnits(tenantId: string, keyId: string, meter: string): Promise<bigint | null> {
  const [row] = await database.sql<{ units: string }[]>`
    select units::text from usage_daily_key_units where tenant_id = ${tenantId} and key_id = ${keyId} and meter = ${meter}`
  return row === undefined ? null : BigInt(row.units)
}

async function periodUnits(tenantId: string, meter: string): Promise<bigint | null> {
  const [row] = await database.sql<{ units: string }[]>`
    select sum(units)::text as units from usage_period_units where tenant_id = ${tenantId} and meter = ${meter}`
  return row?.units == null ? null : BigInt(row.units)
}

async function requestsOf(tenantId: string): Promise<number> {
  const [row] = await database.sql<{ n: string | null }[]>`
    select sum(requests)::text as n from usage_daily where tenant_id = ${tenantId}`
  return Number(row?.n ?? 0)
}

t.test(
  "a key's daily units row at bigint's limit saturates; another tenant's counts in the same flush land",
  async (t) => {
    const full = await createParent(database.sql, { name: 'full' })
    const other = await createParent(database.sql, { name: 'other' })
    const day = utcDay(Date.now())
    // The finding: a key's daily units row just below bigint's limit, then one more answer's units.
    await database.sql`
    insert into usage_daily_key_units (tenant_id, day, key_id, meter, units)
    values (${full.id}, ${day}, ${full.keyId}, 'tokens', ${(BIGINT_MAX - 5n).toString()}::bigint)`
    // And a tenant's period row just below the bound, which this flush would carry past it.
    const periodStart = new Date(Date.now() - (Date.now() % 3_600_000))
    await database.sql`
    insert into usage_period_units (tenant_id, period_start, meter, units, requests)
    values (${full.id}, ${periodStart}, 'tokens', ${USAGE_COUNT_MAX - 5}, 1)`

    let failures = 0
    let refused = 0
    const meter = new UsageMeter({
      sql: database.sql,
      log: silent,
      onFlushFailed: () => failures++,
      onRowRefused: () => refused++,
    })
    meter.record(full.id, 200, true, full.keyId, 1, units('tokens', 10))
    for (let i = 0; i < 3; i++) meter.record(other.id, 200, true, other.keyId, 1, units('tokens', 7))
    await meter.flush()

    t.equal(failures, 0, 'the flush went through at once')
    t.equal(refused, 0, 'nothing was refused: the sums saturate')
    t.equal(meter.lagMs(), 0, 'nothing is left pending')
    t.equal(await requestsOf(other.id), 3, "the other tenant's requests landed")
    t.equal(await keyUnits(other.id, other.keyId, 'tokens'), 21n, "and its key's units")
    t.equal(await periodUnits(other.id, 'tokens'), 21n, 'and its units by period')
    t.equal(await requestsOf(full.id), 1, "the full tenant's request landed too")
    t.equal(
      await keyUnits(full.id, full.keyId, 'tokens'),
      BigInt(USAGE_COUNT_MAX),
      "its key's row saturates at the bound",
    )
    t.equal(await periodUnits(full.id, 'tokens'), BigInt(USAGE_COUNT_MAX), 'its period row stops at the bound too')

    // More units later: the rows stay at the bound, and the flush still goes through.
    meter.record(full.id, 200, true, full.keyId, 1, units('tokens', 1e12))
    await meter.flush()
    t.equal(failures, 0, 'the next flush went through')
    t.equal(await keyUnits(full.id, full.keyId, 'tokens'), BigInt(USAGE_COUNT_MAX), 'still the bound')
    await meter.close()
  },
)

t.test('reports of 10^12 saturate in memory too: thousands in one flush stay at the bound', async (t) => {
  const heavy = await createParent(database.sql, { name: 'heavy' })
  const meter = new UsageMeter({ sql: database.sql, log: silent })
  for (let i = 0; i < 10_000; i++) meter.record(heavy.id, 200, true, heavy.keyId, 1, units('tokens', 1e12))
  await meter.flush()
  t.equal(await periodUnits(heavy.id, 'tokens'), BigInt(USAGE_COUNT_MAX), '10^16 reported, 2^53 − 1 kept')
  t.equal(await keyUnits(heavy.id, heavy.keyId, 'tokens'), BigInt(USAGE_COUNT_MAX), 'by key alike')
  t.equal(await requestsOf(heavy.id), 10_000, 'every request counted')
  // A month of 10^12 a day fits well inside the bound (31 · 10^12 < 2^53 − 1).
  t.ok(31e12 < USAGE_COUNT_MAX)
  await meter.close()
})

t.test('a flush Postgres refuses for one row is split: the others land, that row is dropped and counted', async (t) => {
  const live = await createParent(database.sql, { name: 'live' })
  const second = await createParent(database.sql, { name: 'second' })
  // A tenant that is not in Postgres (its row would break the tenants foreign key): the row at fault.
  const gone = randomUUID()
  let refused = 0
  const meter = new UsageMeter({ sql: database.sql, log: silent, onRowRefused: () => refused++ })
  for (let i = 0; i < 4; i++) meter.record(live.id, 200, true, live.keyId, 2, units('tokens', 5))
  meter.record(gone, 500)
  meter.record(second.id, 404)
  await meter.flush()

  t.equal(refused, 1, 'one row refused, counted')
  t.equal(meter.lagMs(), 0, 'nothing is left in doubt: the flush is not retried whole')
  t.equal(await requestsOf(live.id), 4, "the live tenant's requests landed")
  t.equal(await periodUnits(live.id, 'tokens'), 20n, 'its reported units')
  t.equal(await periodUnits(live.id, 'requests'), 8n, 'its request units')
  t.equal(await keyUnits(live.id, live.keyId, 'requests'), 8n, 'by key too')
  t.equal(await requestsOf(second.id), 1, "the tenant after the bad row's landed")
  const [marked] = await database.sql<{ n: number }[]>`
    select count(*)::int as n from usage_flush_marks where replica_id = ${meter.replicaId}`
  t.equal(marked?.n, 1, "the replica's flush mark moved on")

  meter.record(live.id, 200)
  await meter.flush()
  t.equal(refused, 1, 'the next flush refuses nothing: the bad row is gone')
  t.equal(await requestsOf(live.id), 5, 'and counts on')
  await meter.close()
})
