// The rate lease script (src/limits/scripts.ts) called directly on the machine's Redis (and, to
// stall it, on a server of the test's own): a replica
// that spent its lease and renews it cannot get the room back as if the bucket had refilled into
// it meanwhile (docs/internals.md, limits: tokens plus leases out never exceed N). And the lease
// store's deadline (src/limits/lease-store.ts) does not fail an answer that came in time.
import t from 'tap'
import { limitKeys } from '../../src/limits/keys.js'
import { DEFAULT_LEASE_TIMINGS, RedisLeaseStore } from '../../src/limits/lease-store.js'
import { agedRedis } from '../helpers/limits.js'
import { startRedis } from '../helpers/own-redis.js'
import { sleep } from '../helpers/poll.js'
import { redisClient, redisPrefix, requireRedis } from '../helpers/redis.js'

await requireRedis()
const prefix = redisPrefix(t)
const redis = redisClient(t)
await agedRedis(redis, prefix)

const N = 100
const call = (key: string) => ({ key, requests: N, perMs: 1_000, returned: 0, extra: 0, batch: 1, epoch: '', seen: -1 })

// Each case: the replica leases 10 of a full bucket (90 left), waits long enough for the bucket to
// refill those 10 were they not held (300 ms: 30 tokens), spends some, then renews keeping the rest.
// What it spent, what it keeps and what it is granted at once must not exceed N.
const cases: [string, { spent: number; refunded: number }][] = [
  ['spent it all, keeps nothing', { spent: 10, refunded: 0 }],
  ['spent 4, keeps 6', { spent: 4, refunded: 0 }],
  ['spent 2, one of them refunded', { spent: 2, refunded: 1 }],
]

for (const [name, { spent, refunded }] of cases) {
  t.test(`a renewal after the lease was spent: ${name}`, async (t) => {
    const store = new RedisLeaseStore(redis, prefix)
    const key = limitKeys.rate(prefix, name)
    const first = await store.rate({ ...call(key), keep: 0, wanted: 10 })
    t.equal(first.granted, 10)
    await sleep(300)
    const keep = 10 - spent
    const renewed = await store.rate({ ...call(key), keep, returned: refunded, wanted: N })
    const passed = spent - refunded + keep + renewed.granted
    // The spent units passed just before this call; the grant can pass just after: a window of a
    // few ms, in which at most N (plus those ms' refill, under one token) may pass.
    t.ok(passed <= N, `${spent - refunded} passed, ${keep} kept, ${renewed.granted} granted: ${passed} of ${N}`)
  })
}

t.test("a rate's extra is charged to a bucket rebuilt since the caller's epoch, not to the one it saw", async (t) => {
  const store = new RedisLeaseStore(redis, prefix)
  const key = limitKeys.rate(prefix, 'extra')
  const first = await store.rate({ ...call(key), keep: 0, wanted: 0 })
  t.ok(first.epoch.length > 0, 'the answer names the bucket')
  // The same bucket, lived through an outage: what passed meanwhile is not charged.
  const same = await store.rate({ ...call(key), keep: 0, wanted: 0, extra: 30, epoch: first.epoch })
  t.equal(same.epoch, first.epoch, 'the same bucket')
  t.ok(same.tokens > N - 1, `not charged (${same.tokens})`)
  // Redis forgot it (a restart): the rebuilt bucket is charged for the outage.
  await redis.del(key)
  const rebuilt = await store.rate({ ...call(key), keep: 0, wanted: 0, extra: 30, epoch: first.epoch })
  t.not(rebuilt.epoch, first.epoch, 'a new bucket')
  t.equal(rebuilt.tokens, N - 30, 'charged for what passed while the caller was on its own')
  // Rebuilt for a caller that saw the bucket nearly empty: it starts so, not full.
  await redis.del(key)
  const drained = await store.rate({ ...call(key), keep: 0, wanted: 0, epoch: first.epoch, seen: 4 })
  t.ok(drained.tokens < 5, `starts as the caller last saw it (${drained.tokens})`)
  // A caller that never saw a bucket has nothing to charge to it.
  await redis.del(key)
  const fresh = await store.rate({ ...call(key), keep: 0, wanted: 0, extra: 30 })
  t.equal(fresh.tokens, N, 'a caller without an epoch is not charged')
  // Down to empty at most, never into a debt that would refuse for W after Redis is back.
  await redis.del(key)
  const most = await store.rate({ ...call(key), keep: 0, wanted: 0, extra: 3 * N, epoch: first.epoch })
  t.equal(most.tokens, 0, 'a debt beyond the bucket is not charged')
})

t.test("a lease call answered while this process was stalled past the call's deadline is not failed", async (t) => {
  // A redis-server of its own: the busy script below would hold the machine's Redis for 200 ms,
  // and with it every test file running beside this one.
  const server = await startRedis(t)
  const redis = redisClient(t, { url: server.url })
  await agedRedis(redis, prefix)
  const callTimeoutMs = 50
  const store = new RedisLeaseStore(redis, prefix, { ...DEFAULT_LEASE_TIMINGS, callTimeoutMs })
  const key = limitKeys.rate(prefix, 'stalled')
  await store.rate({ ...call(key), keep: 0, wanted: 0 }) // the script loaded: one round trip below
  const pending = store.rate({ ...call(key), keep: 0, wanted: 10 })
  // The call is on the socket; this process does nothing for three deadlines (a long collection, a
  // starved CPU) while Redis answers. The deadline's timer then runs before the answer is read.
  const stallUntil = performance.now() + 3 * callTimeoutMs
  while (performance.now() < stallUntil) {}
  const answer = await pending.then(
    (reply) => reply,
    (err: Error) => err,
  )
  t.notOk(answer instanceof Error, `answered, not failed (${answer instanceof Error ? answer.message : 'granted'})`)
  t.equal((answer as { granted: number }).granted, 10)
  // A Redis that does answer late still fails the call, at its deadline.
  const blocker = redisClient(t, { url: server.url })
  // Connected first: under load its connection and ready check took longer than the 20 ms below,
  // and the call then went to a Redis not yet busy.
  await blocker.ping()
  const blocked = blocker.eval(
    "local s = redis.call('TIME') local n repeat n = redis.call('TIME') until (n[1] - s[1]) * 1000000 + n[2] - s[2] >= 200000 return 1",
    0,
  )
  let redisFree = false
  void blocked.then(() => (redisFree = true))
  await sleep(20)
  const late = await store.rate({ ...call(key), keep: 0, wanted: 1 }).then(
    () => null,
    (err: Error) => err.message,
  )
  t.match(late, /unanswered after 50 ms/, 'a Redis busy for 200 ms fails the call')
  t.notOk(redisFree, 'at its deadline, before Redis is free again')
  await blocked
})

t.test("a metered rate's debt is charged to any bucket, below zero, down to -N at most", async (t) => {
  const store = new RedisLeaseStore(redis, prefix)
  const key = limitKeys.rate(prefix, 'debt', 'tokens')
  const first = await store.rate({ ...call(key), keep: 0, wanted: 1 })
  t.equal(first.granted, 1)
  // Its answer reported 40 units: the lease's 1 spent, 39 owed. perMs 1000: 0.1 a ms refills.
  const owed = await store.rate({ ...call(key), keep: 0, wanted: 1, debt: 39, epoch: first.epoch })
  t.equal(owed.granted, 1, 'the bucket still had units: one granted')
  t.ok(owed.tokens <= N - 40 - 1 + 5 && owed.tokens >= N - 40 - 1, `charged 40 in all (${owed.tokens})`)
  const deep = await store.rate({ ...call(key), keep: 0, wanted: 1, debt: 500, epoch: owed.epoch })
  t.equal(deep.granted, 0, 'below zero: nothing granted')
  t.equal(deep.tokens, -N, 'a debt beyond -N is forgiven')
  t.ok(deep.waitMs >= N * 10, `the wait covers the debt's refill (${deep.waitMs} ms)`)
})

t.test(
  "a quota's report sent again (its answer came too late) is applied once, and answers its grant again",
  async (t) => {
    const store = new RedisLeaseStore(redis, prefix)
    const key = limitKeys.quota(prefix, 'report-twice', '2026-11')
    const quota = { key, requests: 1_000, returned: 0, init: 100, expireAt: Date.now() + 60_000 }
    const first = await store.quota({ ...quota, epoch: '', keep: 0, wanted: 10, extra: 0, report: 'r1' })
    t.match(first, { rebuild: false, granted: 10, used: 110 })
    const epoch = first.rebuild ? '' : first.epoch
    // 40 admitted on its own while Redis did not answer: the call ran, its answer was too late.
    const report = { ...quota, epoch, keep: 0, wanted: 10, extra: 40, report: 'r2' }
    t.match(await store.quota(report), { granted: 10, used: 160 })
    t.match(await store.quota(report), { granted: 10, used: 160 }, 'sent again: the same answer, nothing added')
    t.match(await store.quota({ ...report, report: 'r3' }), { granted: 10, used: 210 }, 'another report is added')
  },
)

t.test("a quota's month rebuilt since the caller's copy counts what Postgres may not have held", async (t) => {
  const store = new RedisLeaseStore(redis, prefix)
  const key = limitKeys.quota(prefix, 'rebuilt', '2026-11')
  const quota = { key, requests: 10_000, returned: 0, wanted: 0, expireAt: Date.now() + 60_000 }
  let reports = 0
  const ask = async (fields: {
    epoch: string
    keep: number
    extra: number
    init: number
    unwritten: number
    unwrittenSinceRead?: number
  }) => {
    const answer = await store.quota({ ...quota, ...fields, report: `r${++reports}` })
    if (answer.rebuild) throw new Error('a copy was expected')
    return answer
  }
  const seen = await ask({ epoch: '', keep: 0, extra: 0, init: 100, unwritten: 0 })
  t.equal(seen.used, 100, 'made from the read')
  const same = await ask({ epoch: seen.epoch, keep: 5, extra: 7, init: -1, unwritten: 30 })
  t.equal(same.used, 107, 'the copy the caller saw: its extra, nothing of what it kept or did not write')

  await redis.del(key)
  t.match(await store.quota({ ...quota, epoch: seen.epoch, keep: 5, extra: 7, init: -1, unwritten: 30, report: 'x' }), {
    rebuild: true,
  })
  const mine = await ask({ epoch: seen.epoch, keep: 5, extra: 7, init: 200, unwritten: 30, unwrittenSinceRead: 3 })
  t.not(mine.epoch, seen.epoch, 'a new copy')
  t.equal(mine.used, 208, "made from the caller's read: what it keeps, and what it had not written when it read")
  t.match(
    await store.quota({ ...quota, epoch: seen.epoch, keep: 4, extra: 9, init: -1, unwritten: 20, report: 'y' }),
    { rebuild: true },
    'another replica that saw the old copy reads the month too',
  )
  const later = await ask({ epoch: seen.epoch, keep: 2, extra: 9, init: 210, unwritten: 20, unwrittenSinceRead: 1 })
  t.equal(later.used, 221, 'one whose read found more: that difference too (2 + 1 + 10)')
  const much = await ask({ epoch: seen.epoch, keep: 2, extra: 9, init: 300, unwritten: 20, unwrittenSinceRead: 1 })
  t.equal(much.used, 243, 'never more than all it had not written (2 + 20)')
  const earlier = await ask({ epoch: seen.epoch, keep: 2, extra: 9, init: 150, unwritten: 20, unwrittenSinceRead: 1 })
  t.equal(earlier.used, 246, 'one whose read found less: its read is in the copy (2 + 1)')
  const known = await ask({ epoch: mine.epoch, keep: 3, extra: 2, init: -1, unwritten: 50 })
  t.equal(known.used, 248, 'the copy it saw: its extra only')
})
