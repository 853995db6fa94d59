// The simulator's read of the request log (request-log/replay-records.ts) on a real Postgres: the
// records of a range that reached the limits, of sub-accounts only, handed on in the order they
// arrived, though two writers' rows overlap in time and a row keeps its records as they ended.
import pino from 'pino'
import t, { type Test } from 'tap'
import type { RequestRecord } from '../../src/request-log/capture.js'
import { type ReplayRange, type ReplayReading, replayInOrder } from '../../src/request-log/replay-records.js'
import { RequestLogWriter } from '../../src/request-log/writer.js'
import { writerOn } from '../helpers/request-log-rows.js'
import { ACCOUNTS, logRecord, madeId, uuid } from '../helpers/request-records.js'

const [account, otherAccount] = ACCOUNTS as [string, string]
const subs = [uuid(2, 1), uuid(2, 2), uuid(2, 3)]
// Yesterday at noon: the records' 100 s never cross midnight, whose partitions would split a row in two.
const DAY_MS = 86_400_000
const base = Math.floor(Date.now() / DAY_MS) * DAY_MS - DAY_MS / 2
let count = 0
const record = (atS: number, fields: Partial<RequestRecord> = {}): RequestRecord =>
  logRecord({ id: madeId(++count), path: '/api/x', timeMs: base + atS * 1000, accountId: account, ...fields })
const range = (fromS: number, toS: number, tenantId: string | null = null): ReplayRange => ({
  accountId: account,
  tenantId,
  from: new Date(base + fromS * 1000),
  to: new Date(base + toS * 1000),
})

/** The two reads: a server's binary COPY (replay-copy.ts), and the JSON the embedded PGlite is read as. */
const READINGS = [
  ['as a COPY', { copy: true }],
  ['as JSON', { copy: false }],
] as const

/** What `replayInOrder` hands on, read each way: [tenant, second, cost, units]. */
async function replayed(sql: Parameters<typeof replayInOrder>[0], of: ReplayRange, reading: ReplayReading) {
  const seen: [string, number, number, unknown][] = []
  await replayInOrder(sql, of, reading, (row, i) => {
    seen.push([
      row.tenantIds[i]!,
      Math.round((row.timesUs[i]! / 1000 - base) / 1000),
      row.costs[i]!,
      row.units?.[i] ?? null,
    ])
    return undefined
  })
  return seen
}

t.test('in arrival order across overlapping rows, each kept as its answers ended', async (t) => {
  const { sql, writer } = await writerOn(t, 4)
  const second = new RequestLogWriter({ sql, log: pino({ level: 'silent' }), rowRecords: 3 })
  t.teardown(() => second.close())
  // Seconds 1..40, each written a little out of order, alternately by two writers (two replicas).
  const seconds = Array.from({ length: 40 }, (_, i) => i + 1)
  const asEnded = [...seconds].sort((a, b) => a + ((a * 7) % 5) - (b + ((b * 7) % 5)))
  t.not(asEnded.join(), seconds.join(), 'the records are written out of order')
  asEnded.forEach((s, i) => {
    const units = s % 4 === 0 ? `{"tokens":${s}}` : null
    ;(i % 3 === 0 ? second : writer).add(record(s, { tenantId: subs[s % 3]!, cost: 1 + (s % 2), units }))
  })
  await Promise.all([writer.flush(), second.flush()])
  for (const [how, reading] of READINGS) {
    t.same(
      await replayed(sql, range(0, 100), reading),
      seconds.map((s) => [subs[s % 3], s, 1 + (s % 2), s % 4 === 0 ? { tokens: s } : null]),
      `${how}: every record, in time order, with its cost and units`,
    )
    t.same(
      (await replayed(sql, range(10, 20, subs[1]), reading)).map(([, s]) => s),
      [10, 13, 16, 19],
      `${how}: one sub-account's, within [from, to)`,
    )
  }
})

t.test('only what reached the limits: forwarded, or refused by a limit; never the account', async (t) => {
  const { sql, writer } = await writerOn(t, 100)
  const sub = subs[0]!
  const cases: [string, RequestRecord, boolean][] = [
    ['forwarded', record(1, { tenantId: sub }), true],
    ['refused by a rate', record(2, { tenantId: sub, status: 429, code: 'rate_limited', forwarded: false }), true],
    ['refused by a quota', record(3, { tenantId: sub, status: 429, code: 'quota_exceeded', forwarded: false }), true],
    [
      'refused before the limits',
      record(4, { tenantId: sub, status: 403, code: 'ip_not_allowed', forwarded: false }),
      false,
    ],
    ['a management request (cost 0)', record(5, { tenantId: sub, route: 'management', cost: 0 }), false],
    ["the account's own", record(6, { tenantId: account }), false],
    ["another account's", record(7, { tenantId: sub, accountId: otherAccount }), false],
    ['an upstream error, forwarded', record(8, { tenantId: sub, status: 502 }), true],
  ]
  for (const [, r] of cases) writer.add(r)
  await writer.flush()
  for (const [how, reading] of READINGS)
    t.same(
      (await replayed(sql, range(0, 100), reading)).map(([, s, cost]) => [s, cost]),
      cases.filter(([, , taken]) => taken).map(([, r]) => [Math.round((r.timeMs - base) / 1000), 1]),
      `${how}: ${cases.map(([what, , taken]) => `${what}: ${taken ? 'taken' : 'not'}`).join('; ')}`,
    )
  // A row written before costs were kept: its limits' refusals are known by their codes only.
  await sql`update request_log_rows set costs = null`
  for (const [how, reading] of READINGS)
    t.same(
      (await replayed(sql, range(0, 100), reading)).map(([, s]) => s),
      [2, 3],
      `${how}: a row without costs gives its limits' refusals only`,
    )
})

t.test('a replay that fails mid-read ends its read: the error comes back, the connection is free', async (t) => {
  const { sql, writer } = await writerOn(t, 2)
  for (let s = 1; s <= 1000; s++) writer.add(record(s / 10, { tenantId: subs[0]! }))
  await writer.flush()
  for (const [read, reading] of READINGS)
    for (const [how, fail] of [
      [
        'throws',
        () => {
          throw new Error('replay broke')
        },
      ],
      ['rejects', () => Promise.reject(new Error('replay broke'))],
    ] as const) {
      let seen = 0
      await t.rejects(
        replayInOrder(sql, range(0, 1000), reading, () => (++seen === 150 ? fail() : undefined)),
        /replay broke/,
        `${read}, ${how} at the 150th record: the replay fails`,
      )
      const [counted] = await sql<{ n: number }[]>`select count(*)::int as n from request_log_rows`
      t.equal(counted?.n, 500, 'and the pool answers the next query')
    }
})

/** 20,000 records from `fromS` on, 200 s of them, replayed slower than they are read. */
async function replaySlowerThanRead(t: Test, fromS: number): Promise<void> {
  const { sql, writer } = await writerOn(t, 20)
  // 1,000 rows: three COPYs of a few hundred kB, each filling the stream while the replay waits.
  for (let s = 1; s <= 20_000; s++) writer.add(record(fromS + s / 100, { tenantId: subs[s % 3]! }))
  await writer.flush()
  for (const [how, reading] of READINGS) {
    let seen = 0
    let last = 0
    let ordered = true
    await replayInOrder(sql, range(fromS, fromS + 1000), reading, (row, i) => {
      ordered &&= row.timesUs[i]! >= last
      last = row.timesUs[i]!
      return ++seen % 1000 === 0 ? new Promise((resolve) => setTimeout(resolve, 5)) : undefined
    })
    t.equal(seen, 20_000, `${how}: every record`)
    t.ok(ordered, `${how}: in time order`)
  }
}

t.test('a replay slower than its read: every batch arrives, and the transaction goes on after each', (t) =>
  replaySlowerThanRead(t, 0),
)

// Across midnight the rows lie in two days' partitions, and the JSON read's cursor had ended when
// its last batch was asked for: postgres.js then answers a plain `{ done: true }`, not a promise.
t.test('the same across midnight: both days read, and the JSON cursor ends cleanly', (t) =>
  replaySlowerThanRead(t, DAY_MS / 2000 - 100),
)

t.test('rows of one time across the COPYs and the listing fetches: each read once', async (t) => {
  const { sql, writer } = await writerOn(t, 1)
  // 6,000 rows of one record at one instant: three COPYs' worth of rows and two fetches of the listing.
  for (let i = 0; i < 6_000; i++) writer.add(record(5, { tenantId: subs[i % 3]! }))
  await writer.flush()
  for (const [how, reading] of READINGS) {
    const counts = new Map<string, number>()
    await replayInOrder(sql, range(0, 10), reading, (row, i) => {
      counts.set(row.tenantIds[i]!, (counts.get(row.tenantIds[i]!) ?? 0) + 1)
      return undefined
    })
    t.same(Object.fromEntries(counts), Object.fromEntries(subs.map((sub) => [sub, 2_000])), `${how}: every record once`)
  }
})

t.test(
  'a COPY its statement timeout ends while the replay waits: the error comes back, the pool goes on',
  async (t) => {
    const { sql, writer } = await writerOn(t, 500)
    // 40 MB in one COPY (records of about 1 kB of units): far more than the sockets hold, so that
    // Postgres is still writing it when the replay stops to wait.
    const units = JSON.stringify(Object.fromEntries(Array.from({ length: 90 }, (_, i) => [`meter_${i}`, i])))
    for (let s = 1; s <= 40_000; s++) writer.add(record(s / 100, { tenantId: subs[0]!, units }))
    await writer.flush()
    let seen = 0
    const copyOverran = async () => {
      // Waits (for a condition, not a time) until the COPY cannot end well: blocked on its client
      // past its timeout (the error is sent once the replay reads on), or already ended by it (a
      // loaded server that had not filled the sockets by then).
      for (;;) {
        const [row] = await sql<{ blocked: boolean; running: boolean }[]>`
          select coalesce(bool_or(wait_event = 'ClientWrite' and clock_timestamp() - query_start > interval '1 s'), false) as blocked,
            count(*) > 0 as running
          from pg_stat_activity
          where datname = current_database() and query like 'copy (%' and state = 'active'`
        if (row!.blocked || !row!.running) return
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }
    await t.rejects(
      replayInOrder(sql, range(0, 1000), { copy: true, statementTimeoutMs: 500 }, () =>
        ++seen === 100 ? copyOverran() : undefined,
      ),
      { code: '57014' },
      'the replay fails with the timeout',
    )
    t.ok(seen >= 100 && seen < 40_000, `it stopped mid-COPY (${seen} records handed on)`)
    const [open] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`
    t.equal(open!.n, 0, 'no transaction is left open')
  },
)
