// Usage flushes are applied once (docs/api.md, docs/internals.md): a flush that Postgres
// committed but whose reply was lost is retried with the same batch id and adds nothing twice. The
// connection is really cut, by a relay between the meter and Postgres, right after it forwarded the
// flush's statement (one statement, committed on its own) and before the reply comes back.
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import postgres from 'postgres'
import { pino } from 'pino'
import t from 'tap'
import { addUsage } from '../../src/store/usage.js'
import { UsageMeter } from '../../src/usage/meter.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'

const database = await freshDatabase(t)
const silent = pino({ level: 'silent' })

/** ReadyForQuery, idle: Postgres sends it once the statement's implicit transaction committed. */
const READY_IDLE = Buffer.from([0x5a, 0, 0, 0, 5, 0x49])

/**
 * A TCP relay to the test database's server that can drop the reply to the next usage flush: it
 * lets the statement through, holds back the server's answer from its completion on, and cuts
 * both connections once Postgres says the transaction is over (committed).
 */
async function relay(target: URL): Promise<{ url: string; dropNextFlushReply(): void; cut: Promise<void> }> {
  let armed = false
  let sawFlush = false
  let dropping = false
  let markCut!: () => void
  const cut = new Promise<void>((resolve) => (markCut = resolve))
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname)
    sockets.add(client).add(upstream)
    const end = () => {
      client.destroy()
      upstream.destroy()
    }
    client.on('data', (chunk: Buffer) => {
      if (armed && /insert into usage_batches/i.test(chunk.toString('latin1'))) sawFlush = true
      upstream.write(chunk)
    })
    upstream.on('data', (chunk: Buffer) => {
      if (armed && sawFlush && chunk.includes('SELECT 1')) {
        armed = false
        dropping = true
      }
      if (!dropping) {
        client.write(chunk)
        return
      }
      if (chunk.includes(READY_IDLE)) {
        dropping = false
        end()
        markCut()
      }
    })
    client.on('error', end).on('close', end)
    upstream.on('error', end).on('close', end)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const socket of sockets) socket.destroy()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const url = new URL(target)
  url.host = `127.0.0.1:${(server.address() as AddressInfo).port}`
  return { url: url.toString(), dropNextFlushReply: () => (armed = true), cut }
}

async function requestsOf(tenantId: string): Promise<number> {
  const [row] = await database.sql<
    { n: string | null }[]
  >`select sum(requests) as n from usage_daily where tenant_id = ${tenantId}`
  return Number(row?.n ?? 0)
}

/** Every count of a tenant's rows, summed: requests, forwarded, limited by a rate and by a quota. */
async function countsOf(
  tenantId: string,
): Promise<{ requests: number; forwarded: number; rate: number; quota: number }> {
  const [row] = await database.sql<{ requests: string; forwarded: string; rate: string; quota: string }[]>`
    select coalesce(sum(requests), 0)::text as requests, coalesce(sum(forwarded), 0)::text as forwarded,
           coalesce(sum(limited_rate), 0)::text as rate, coalesce(sum(limited_quota), 0)::text as quota
    from usage_daily where tenant_id = ${tenantId}`
  return {
    requests: Number(row!.requests),
    forwarded: Number(row!.forwarded),
    rate: Number(row!.rate),
    quota: Number(row!.quota),
  }
}

t.test('addUsage applies a batch id once', async (t) => {
  const account = await createParent(database.sql, { name: 'once' })
  const rows = [
    { tenantId: account.id, day: '2026-11-21', statusClass: 2, requests: 5, forwarded: 4 },
    {
      tenantId: account.id,
      day: '2026-11-21',
      statusClass: 4,
      requests: 3,
      forwarded: 0,
      limitedRate: 2,
      limitedQuota: 1,
    },
  ]
  const id = '6b1d2c9e-1f0a-4c55-9d43-0a1b2c3d4e5f'
  t.equal(await addUsage(database.sql, id, { counts: rows }), true, 'applied')
  t.equal(await addUsage(database.sql, id, { counts: rows }), false, 'the same id again is not')
  t.same(await countsOf(account.id), { requests: 8, forwarded: 4, rate: 2, quota: 1 }, 'every count once')
  t.equal(
    await addUsage(database.sql, '7b1d2c9e-1f0a-4c55-9d43-0a1b2c3d4e5f', { counts: rows }),
    true,
    'another id adds',
  )
  t.same(await countsOf(account.id), { requests: 16, forwarded: 8, rate: 4, quota: 2 }, 'onto the same rows')
})

t.test('a flush whose reply was lost after Postgres committed it is not counted twice', async (t) => {
  const account = await createParent(database.sql, { name: 'lost' })
  const link = await relay(new URL(database.url))
  const sql = postgres(link.url, { max: 1, onnotice: () => {} })
  t.teardown(() => sql.end({ timeout: 1 }))
  let failures = 0
  const meter = new UsageMeter({ sql, log: silent, onFlushFailed: () => failures++ })

  for (let i = 0; i < 7; i++) meter.record(account.id, 200, true)
  meter.limited(account.id, 'quota')
  link.dropNextFlushReply()
  await meter.flush()
  await link.cut
  t.equal(failures, 1, 'the meter saw the flush fail')
  t.equal(await requestsOf(account.id), 7, 'yet Postgres committed it')
  t.ok(meter.lagMs() >= 0, 'the batch is kept')

  for (let i = 0; i < 3; i++) meter.record(account.id, 503)
  await meter.flush()
  t.equal(failures, 1, 'the retry went through')
  t.equal(await requestsOf(account.id), 10, 'the retried batch added nothing; the newer counts were added once')
  t.same(
    await countsOf(account.id),
    { requests: 10, forwarded: 7, rate: 0, quota: 1 },
    'forwarded and limited once too',
  )
  t.equal(meter.lagMs(), 0, 'nothing pending')
})
