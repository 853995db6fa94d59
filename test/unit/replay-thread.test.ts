// A large simulation's replay on a thread of its own (src/limits/replay-thread.ts): the same answer
// as LimitReplay on the caller's thread, over more batches than may be in flight at once (so the
// caller waits for the thread), sub-accounts and meters first seen in later batches, a month
// boundary and the month's use before the range; a thread that fails or is stopped says so.
import t from 'tap'
import { BATCH_RECORDS, ReplayThread } from '../../src/limits/replay-thread.js'
import { LimitReplay, type MonthUseBefore, type RequestReplay, useBeforeOf } from '../../src/limits/simulation.js'
import type { Limits } from '../../src/limits/types.js'

const DEC = Date.UTC(2026, 11, 1)
const limits: Limits = {
  rate: { requests: 40, perSeconds: 60 },
  monthlyQuota: { requests: 30_000 },
  meters: [
    { meter: 'images', rate: null, monthlyQuota: { requests: 500 } },
    { meter: 'tokens', rate: { requests: 60, perSeconds: 60 }, monthlyQuota: { requests: 40_000 } },
  ],
}
const tenants = Array.from({ length: 7 }, (_, i) => `sub-${i}`)
const useBefore: MonthUseBefore = {
  month: '2026-11',
  uses: new Map(tenants.map((tenant, i) => [`${tenant} requests`, i * 1_000])),
}
/** 100,000 requests over the end of November: six batches, more than may be in flight. */
const COUNT = 100_000
const start = DEC - 6 * 3_600_000
const requestAt = (i: number) => {
  const startMs = start + i * 300
  // A sub-account first seen past the first batch, and a meter first reported in a later one.
  const tenant = i < BATCH_RECORDS ? tenants[i % 6]! : tenants[i % 7]!
  const units: Record<string, number> | null =
    i % 4 === 0 ? { tokens: i % 13 } : i > 3 * BATCH_RECORDS && i % 9 === 0 ? { images: 1, tokens: 2 } : null
  return [tenant, startMs, startMs + (i % 10 === 0 ? 30_000 : 20), 1 + (i % 2), units] as const
}

async function replayed(replay: RequestReplay) {
  let waited = 0
  for (let i = 0; i < COUNT; i++) {
    const waiting = replay.take(...requestAt(i))
    if (waiting !== undefined) {
      waited++
      await waiting
    }
  }
  return { tenants: await replay.close(), waited }
}

t.test('the same answer as on the caller thread, over batches the caller waits for', async (t) => {
  const here = await replayed(new LimitReplay(limits, useBeforeOf(useBefore)))
  const thread = new ReplayThread({ limits, useBefore })
  t.teardown(() => thread.stop())
  const there = await replayed(thread)
  t.same(there.tenants, here.tenants, 'every sub-account as replayed here')
  t.equal(there.tenants.length, 7)
  t.ok(there.waited > 0, `the caller waited for the thread (${there.waited} times)`)
  const refused = there.tenants.reduce((sum, tenant) => sum + tenant.would_refuse, 0)
  t.ok(refused > 0 && refused < COUNT, `some refused, not all (${refused})`)
  t.ok(
    there.tenants.every((tenant) => tenant.units.images === undefined || tenant.units.images > 0),
    'a meter first seen in a later batch is counted',
  )
  t.ok(there.tenants.some((tenant) => tenant.units.images !== undefined))
})

t.test('a thread that fails: the next take or the close rejects with its reason', async (t) => {
  // Limits the limiter cannot read: the thread's first decision throws.
  const thread = new ReplayThread({ limits: { ...limits, meters: 5 as never }, useBefore })
  t.teardown(() => thread.stop())
  const failure = await replayed(thread).catch((error: Error) => error)
  t.match(failure, { message: /^limit simulation: .*not iterable/ })
  await t.rejects(thread.close(), failure as Error, 'and stays failed')
})

t.test('a stopped thread takes nothing more', async (t) => {
  const thread = new ReplayThread({ limits, useBefore })
  thread.take(...requestAt(0))
  await thread.stop()
  t.throws(() => thread.take(...requestAt(1)), /stopped/)
  await t.rejects(thread.close(), /stopped/)
  await thread.stop()
})

t.test('stopped while the close waits for the thread: the close rejects, nothing hangs', async (t) => {
  const thread = new ReplayThread({ limits, useBefore })
  for (let i = 0; i < 3 * BATCH_RECORDS; i++) await thread.take(...requestAt(i))
  const closed = t.rejects(thread.close(), /stopped/)
  await thread.stop()
  await closed
})
