// The key batcher's logic (src/store/key-lookup-batcher.ts) over a fake query and a fake clock:
// how many queries a flood of lookups makes, that none is dropped, and that a lookup with nothing
// ahead of it is not held back. Counts only: the fake clock moves when the test says so.
import t from 'tap'
import { QueryTimeoutError } from '../../src/store/db.js'
import { type BatchClock, KeyLookupBatcher } from '../../src/store/key-lookup-batcher.js'

/** A clock whose time moves only by `advance`, which runs the timers that fell due. */
function fakeClock(): BatchClock & { advance(ms: number): Promise<void>; timers(): number } {
  let now = 1_000_000
  let timers: { at: number; run: () => void }[] = []
  return {
    now: () => now,
    setTimeout: (run, ms) => {
      const timer = { at: now + ms, run }
      timers.push(timer)
      return () => {
        timers = timers.filter((t) => t !== timer)
      }
    },
    timers: () => timers.length,
    async advance(ms) {
      now += ms
      for (;;) {
        const due = timers.filter((timer) => timer.at <= now)
        if (due.length === 0) break
        timers = timers.filter((timer) => timer.at > now)
        for (const timer of due) timer.run()
        await settle()
      }
      await settle()
    },
  }
}

/** Lets every promise chain that can move, move (the batcher's answers take a few turns). */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve))

const digestOf = (n: number) => {
  const digest = Buffer.alloc(32)
  digest.writeUInt32BE(n)
  return digest
}

/** A fake store: digests below `known` are keys (their row is their number); records every query. */
function store(known = Number.POSITIVE_INFINITY) {
  const queries: number[][] = []
  let hold: Promise<void> | null = null
  return {
    queries,
    holdNext(until: Promise<void>) {
      hold = until
    },
    query: async (digests: readonly Buffer[]) => {
      queries.push(digests.map((d) => d.readUInt32BE(0)))
      const waitFor = hold
      hold = null
      if (waitFor !== null) await waitFor
      return digests.filter((d) => d.readUInt32BE(0) < known).map((d) => ({ keyDigest: d, row: d.readUInt32BE(0) }))
    },
  }
}

t.test('a lone lookup goes out at once, on its own, and gets its row or null', async (t) => {
  const clock = fakeClock()
  const s = store(10)
  const batcher = new KeyLookupBatcher(s.query, { clock })
  const found = batcher.lookup(digestOf(7))
  await settle()
  t.same(s.queries, [[7]], 'one query, for that digest, without the clock moving')
  t.equal(clock.timers(), 0, 'no timer was set')
  t.equal(await found, 7)
  t.equal(await batcher.lookup(digestOf(12)), null, 'an unknown digest is null')
  t.equal(s.queries.length, 2)
})

t.test('lookups that arrive while a query is in flight share the next ones, at most maxDigests each', async (t) => {
  const clock = fakeClock()
  const s = store()
  const digests: number[] = []
  const batcher = new KeyLookupBatcher(s.query, { clock, onQuery: (n) => digests.push(n) })
  let release!: () => void
  s.holdNext(new Promise<void>((resolve) => (release = resolve)))
  const first = batcher.lookup(digestOf(0))
  await settle()
  const rest = Array.from({ length: 1_200 }, (_, i) => batcher.lookup(digestOf(i + 1)))
  await settle()
  t.equal(s.queries.length, 1, 'one query in flight at a time')
  t.equal(batcher.waiting, 1_200, 'the others wait, none refused')
  release()
  await clock.advance(0)
  await clock.advance(20)
  t.same(digests, [1, 500, 500, 200], 'then three queries of at most 500 digests')
  t.same(
    await Promise.all([first, ...rest]),
    Array.from({ length: 1_201 }, (_, i) => i),
    'each gets its own row',
  )
})

t.test('the same digest asked twice while waiting is asked of the store once', async (t) => {
  const clock = fakeClock()
  const s = store()
  const batcher = new KeyLookupBatcher(s.query, { clock })
  let release!: () => void
  s.holdNext(new Promise<void>((resolve) => (release = resolve)))
  const busy = batcher.lookup(digestOf(1))
  await settle()
  const twice = [batcher.lookup(digestOf(2)), batcher.lookup(digestOf(2))]
  release()
  await clock.advance(10)
  t.same(await Promise.all([busy, ...twice]), [1, 2, 2])
  t.same(s.queries, [[1], [2]])
})

t.test(
  'a flood at 20 lookups a millisecond for 2 s: at most burst + 2000 / interval queries, all answered',
  async (t) => {
    const clock = fakeClock()
    const s = store(0)
    const batcher = new KeyLookupBatcher(s.query, { clock, pacing: { intervalMs: 5, burst: 4 } })
    const answers: Promise<number | null>[] = []
    let n = 0
    for (let ms = 0; ms < 2_000; ms++) {
      for (let i = 0; i < 20; i++) answers.push(batcher.lookup(digestOf(n++)))
      await clock.advance(1)
    }
    await clock.advance(10)
    const results = await Promise.all(answers)
    t.equal(results.length, 40_000)
    t.ok(
      results.every((r) => r === null),
      'every lookup answered (none of the made-up keys exists)',
    )
    t.ok(s.queries.length <= 4 + 2_000 / 5 + 2, `${s.queries.length} queries for 40,000 lookups`)
    t.ok(s.queries.length >= 2_000 / 5 - 2, 'and the pace is used: a query every interval')
    t.ok(Math.max(...s.queries.map((q) => q.length)) <= 500, 'none over 500 digests')

    // After a quiet spell the pace is back: the next lookup goes out at once.
    await clock.advance(100)
    const before = s.queries.length
    const lone = batcher.lookup(digestOf(n++))
    await settle()
    t.equal(s.queries.length, before + 1, 'a lookup after a quiet spell goes out without waiting for the clock')
    t.equal(await lone, null)
  },
)

t.test('sparse lookups, each alone, never wait for the pace while within the burst', async (t) => {
  const clock = fakeClock()
  const s = store()
  const batcher = new KeyLookupBatcher(s.query, { clock, pacing: { intervalMs: 5, burst: 4 } })
  // Four back to back go out at once; the fifth waits for the clock.
  for (let i = 0; i < 4; i++) {
    const found = batcher.lookup(digestOf(i))
    await settle()
    t.equal(await found, i)
  }
  t.equal(s.queries.length, 4, 'a burst of four, without the clock moving')
  const fifth = batcher.lookup(digestOf(4))
  await settle()
  t.equal(s.queries.length, 4, 'the fifth waits')
  await clock.advance(5)
  t.equal(await fifth, 4, 'until the pace allows it')
  // One lookup every interval never waits.
  for (let i = 5; i < 50; i++) {
    await clock.advance(5)
    const found = batcher.lookup(digestOf(i))
    await settle()
    t.equal(s.queries.length, i + 1, `lookup ${i} went out at once`)
    await found
  }
})

t.test('a failed query fails its own lookups only; the next query goes out', async (t) => {
  const clock = fakeClock()
  let calls = 0
  let release!: () => void
  const held = new Promise<void>((resolve) => (release = resolve))
  const batcher = new KeyLookupBatcher(
    async (digests) => {
      calls++
      if (calls === 1) {
        await held
        throw new Error('connection lost')
      }
      return digests.map((keyDigest) => ({ keyDigest, row: 'found' }))
    },
    { clock },
  )
  const failing = batcher.lookup(digestOf(1))
  await settle()
  const later = batcher.lookup(digestOf(2))
  release()
  await t.rejects(failing, /connection lost/)
  await clock.advance(10)
  t.equal(await later, 'found')
  t.equal(calls, 2)
})

t.test('a query that never answers fails its lookups at its deadline and frees the way', async (t) => {
  let calls = 0
  const batcher = new KeyLookupBatcher(
    (digests) => {
      calls++
      if (calls === 1) return new Promise<never>(() => {})
      return Promise.resolve(digests.map((keyDigest) => ({ keyDigest, row: 'found' })))
    },
    { pacing: { queryDeadlineMs: 20 } },
  )
  // Its refusal is awaited from the start: a slow machine may reach the deadline before `settle`.
  const stuck = t.rejects(batcher.lookup(digestOf(1)), QueryTimeoutError)
  await settle()
  const next = batcher.lookup(digestOf(2))
  await stuck
  t.equal(await next, 'found', 'the next query went out once the stuck one was given up')
  t.equal(calls, 2)
})

t.test('a slow Postgres: a key behind a slow query gets a second query before its deadline', async (t) => {
  const clock = fakeClock()
  const starts: number[] = []
  // Every query takes 300 ms of the fake clock; the deadline is 500 ms.
  const batcher = new KeyLookupBatcher<string>(
    (digests) => {
      starts.push(clock.now())
      return new Promise((resolve) => {
        clock.setTimeout(() => resolve(digests.map((keyDigest) => ({ keyDigest, row: 'found' }))), 300)
      })
    },
    { clock, pacing: { queryDeadlineMs: 500 } },
  )
  const t0 = clock.now()
  const first = batcher.lookup(digestOf(1))
  await clock.advance(50)
  const second = batcher.lookup(digestOf(2))
  // In steps, so that the timers run in the order they fall due.
  for (let i = 0; i < 50; i++) await clock.advance(10)
  t.equal(await first, 'found')
  t.equal(await second, 'found', 'answered within its deadline, though one query was under way when it came')
  t.equal(starts.length, 2)
  t.equal(starts[1]! - t0, 150, 'the second query went out once the key had waited a fifth of its deadline')
})

t.test('a lookup whose deadline passes while it waits leaves the queue with a 503 of its own', async (t) => {
  const clock = fakeClock()
  const s = store()
  const batcher = new KeyLookupBatcher(s.query, { clock, pacing: { queryDeadlineMs: 100 } })
  // Two queries that never answer take both places; then a flood waits behind them.
  s.holdNext(new Promise<void>(() => {}))
  const stuck = [batcher.lookup(digestOf(1))]
  await clock.advance(30)
  s.holdNext(new Promise<void>(() => {}))
  stuck.push(batcher.lookup(digestOf(2)))
  const stuckSettled = Promise.allSettled(stuck)
  // A fifth of the deadline later, the second key gets the second query of its own.
  for (let i = 0; i < 3; i++) await clock.advance(10)
  t.equal(s.queries.length, 2, 'two queries in flight, both stuck')
  // Their deadline (30 ms) ends before either query in flight ends or gives up (100 ms).
  const queued = Array.from({ length: 50 }, (_, i) => batcher.lookup(digestOf(100 + i), 30))
  const outcomes = Promise.allSettled(queued)
  for (let i = 0; i < 4; i++) await clock.advance(10)
  const settled = await outcomes
  t.equal(batcher.waiting, 0, 'they left the queue')
  for (let i = 0; i < 10; i++) await clock.advance(10)
  t.ok(
    settled.every((o) => o.status === 'rejected' && (o.reason as { code?: string }).code === 'store_unavailable'),
    "each queued lookup failed as the gateway's own 503, not as a Postgres timeout (which would open the store breaker)",
  )
  await stuckSettled
  t.equal(batcher.waiting, 0, 'nothing is left queued: their digests were never sent')
  t.notOk(
    s.queries.flat().some((n) => n >= 100),
    'no query asked for them',
  )
})
