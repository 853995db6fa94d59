// One parent floods heavy reads (usage reconciliations) inside its management rate while their
// statements cannot end: a transaction of the test holds usage_period_units locked, so each
// reconciliation's statement waits in Postgres as a reconciliation over a long history would run
// (docs/operations.md, the heavy reads). Before the heavy reads had connections and a gate of
// their own, the flood filled the pool's 10 connections with statements that ran on after their
// call was answered 503, and for as long as it lasted another parent's calls, a new key's first
// request, a warm key's request got 503 and /readyz said Postgres was down. Here they all succeed
// meanwhile, and the flood's statements are gone from pg_stat_activity once their calls are
// answered, though the lock is still held.
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent, startGateway } from '../helpers/gateway.js'
import { sleep, until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'
import { watchCrashes } from './crashes.js'
import { codeOf, type Timed, timedCall } from './timed-call.js'

/** A management call's store deadline here: the flood's calls are answered 503 at it. */
const MANAGEMENT_MS = 3_000
/** The flood: a reconciliation started this often (25 a second, inside the default 50/1s). */
const FLOOD_EVERY_MS = 40
/**
 * The least a round of the other parent's calls takes: its two management calls a round stay far
 * inside its own management rate however fast the machine runs them.
 */
const ROUND_MS = 100
/** How long a call may go unanswered before the test calls it a hang. */
const HANG_LIMIT_MS = 20_000

const crashes = watchCrashes(t)
const db = await freshDatabase(t)
const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  database: db,
  // The gateway's own pools, as main.ts opens them (10 connections, and those of their own).
  pool: {},
  redis: false,
  upstreamUrl: upstream.url,
  env: { MANAGEMENT_RATE: '50/1s' },
  storeDeadlines: { managementMs: MANAGEMENT_MS },
})
const sql = db.sql

const flooder = await createParent(sql, { name: 'flooder' })
const other = await createParent(sql, { name: 'other' })
const sub = await createSubAccount(sql, other.id, { name: 'customer', externalId: null, metadata: {} })
const newKey = (name: string) =>
  mintKey(sql, { tenantId: sub.id, name, scopes: ['orders:read'], withClientSecret: false })
const warm = await newKey('warm')

/**
 * The flood's statements waiting in Postgres: those of the gateway's heavy reads' pool that wait for
 * the lock (its background jobs, the period close and the meter's flush, wait for it too).
 */
async function flooding(): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
    where application_name like 'tenancy-gateway % reads' and wait_event_type = 'Lock'`
  return row!.n
}

t.test('a parent flooding reconciliations takes nothing from the others', async (t) => {
  t.equal((await timedCall(gw.url, warm.apiKey, { path: '/orders' }, HANG_LIMIT_MS)).res?.status, 200, 'warm')

  // The lock that keeps every reconciliation's statement running, held until the end.
  let release!: () => void
  const released = new Promise<void>((resolve) => (release = resolve))
  let locked!: () => void
  const isLocked = new Promise<void>((resolve) => (locked = resolve))
  const holder = sql.begin(async (tx) => {
    await tx`lock table usage_period_units in access exclusive mode`
    locked()
    await released
  })
  t.teardown(() => release())
  await isLocked

  let flood = true
  const floodCalls: Promise<Timed>[] = []
  const flooder_ = (async () => {
    while (flood) {
      floodCalls.push(
        timedCall(gw.url, flooder.apiKey, { path: '/v1/sub-accounts/usage/reconciliation' }, HANG_LIMIT_MS),
      )
      await sleep(FLOOD_EVERY_MS)
    }
  })()
  t.ok(await until(HANG_LIMIT_MS, async () => (await flooding()) >= 2), "the flood's statements hold connections")

  // Meanwhile, twice over a deadline of the flood's: another parent's calls, a new key's first
  // request, the warm key's, /readyz.
  const outcomes: string[] = []
  const started = Date.now()
  let round = 0
  while (Date.now() - started < 2 * MANAGEMENT_MS) {
    round++
    const paced = sleep(ROUND_MS)
    const fresh = await newKey(`fresh ${round}`)
    const [list, created, first, again, ready] = await Promise.all([
      timedCall(gw.url, other.apiKey, { path: '/v1/sub-accounts' }, HANG_LIMIT_MS),
      timedCall(gw.url, other.apiKey, { path: `/v1/sub-accounts/${sub.id}` }, HANG_LIMIT_MS),
      timedCall(gw.url, fresh.apiKey, { path: '/orders' }, HANG_LIMIT_MS),
      timedCall(gw.url, warm.apiKey, { path: '/orders' }, HANG_LIMIT_MS),
      timedCall(gw.url, null, { path: '/readyz' }, HANG_LIMIT_MS),
    ])
    const postgres =
      ready.res === null ? null : (ready.res.json() as { checks?: { postgres?: string } }).checks?.postgres
    outcomes.push(
      `list ${list.res?.status} read ${created.res?.status} new key ${first.res?.status} warm key ${again.res?.status} readyz ${ready.res?.status}/${postgres}`,
    )
    await paced
  }
  flood = false
  await flooder_
  const answered = await Promise.all(floodCalls)

  const expected = 'list 200 read 200 new key 200 warm key 200 readyz 200/ok'
  t.same(
    outcomes.filter((outcome) => outcome !== expected),
    [],
    `every round while the flood ran: ${expected} (${outcomes.length} rounds)`,
  )
  const statuses = new Map<string, number>()
  for (const call of answered) {
    const key = `${call.res?.status ?? call.error} ${codeOf(call.res)}`
    statuses.set(key, (statuses.get(key) ?? 0) + 1)
  }
  t.ok(
    (statuses.get('503 store_unavailable') ?? 0) > 0,
    `the flood's calls are answered 503 at their deadline: ${JSON.stringify([...statuses])}`,
  )
  // Every call of the flood is answered: none of their statements may still be waiting.
  t.ok(
    await until(HANG_LIMIT_MS, async () => (await flooding()) === 0),
    "the statements of the flood's answered calls are gone, the lock still held",
  )
  release()
  await holder
  t.same(crashes, [], 'nothing escaped to the process')
})
