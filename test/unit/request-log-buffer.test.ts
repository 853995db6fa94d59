// The request log's buffer (src/request-log/row-buffer.ts): records made into a row per parent and
// day as they come; bounded, its oldest row dropped and counted; rows taken whole, oldest first; a
// failed batch taken back before the newer rows, and its own excess dropped oldest first.
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import type { RequestRecord } from '../../src/request-log/capture.js'
import { ROW_WEIGHT, RowBuffer } from '../../src/request-log/row-buffer.js'
import { MAX_ID_SPAN } from '../../src/request-log/made-ids.js'
import type { RowBuilder } from '../../src/request-log/rows.js'
import { ACCOUNTS, logRecord, madeId, uuid } from '../helpers/request-records.js'

const DAY = 20_000
const record = (n: number, accountId = ACCOUNTS[0]!): RequestRecord => logRecord({ id: `r${n}`, path: '/', accountId })
const ids = (rows: readonly RowBuilder[]) => rows.map((row) => row.ids().join(','))

t.test("a parent's records fill its row, then the next; each parent and each day a row of its own", async (t) => {
  const buffer = new RowBuffer(100, 2)
  buffer.add(record(1), DAY)
  buffer.add(record(2, ACCOUNTS[1]), DAY)
  buffer.add(record(3), DAY)
  buffer.add(record(4), DAY)
  buffer.add(record(5), DAY + 1)
  t.equal(buffer.size, 5)
  const rows = buffer.take(100)
  t.same(ids(rows), ['r1,r3', 'r2', 'r4', 'r5'], 'oldest first, by their first record')
  t.same(
    rows.map((row) => [row.accountId, row.day]),
    [
      [ACCOUNTS[0], DAY],
      [ACCOUNTS[1], DAY],
      [ACCOUNTS[0], DAY],
      [ACCOUNTS[0], DAY + 1],
    ],
  )
  t.equal(buffer.size, 0)
})

t.test('a full buffer drops its oldest row, and counts its records', async (t) => {
  const buffer = new RowBuffer(16, 500)
  // A row holds an eighth of the buffer at most: a drop loses no more than that.
  for (let n = 1; n <= 17; n++) buffer.add(record(n), DAY)
  t.equal(buffer.size, 15)
  t.equal(buffer.dropped, 2)
  t.same(ids(buffer.take(100)), Array.from({ length: 7 }, (_, i) => `r${2 * i + 3},r${2 * i + 4}`).concat('r17'))
})

t.test('take hands out whole rows up to its batch (one at least), and closes an open one', async (t) => {
  const buffer = new RowBuffer(100, 3)
  for (let n = 1; n <= 7; n++) buffer.add(record(n), DAY)
  t.same(ids(buffer.take(5)), ['r1,r2,r3'], 'a second row would pass the batch')
  t.same(ids(buffer.take(1)), ['r4,r5,r6'], 'a row larger than the batch goes whole')
  t.same(ids(buffer.take(10)), ['r7'], 'the open row, taken')
  buffer.add(record(8), DAY)
  t.same(ids(buffer.take(10)), ['r8'], 'a record after it starts a row of its own')
  t.equal(buffer.dropped, 0)
})

t.test('rows put back go before the rows added since; what does not fit goes, oldest first', async (t) => {
  const buffer = new RowBuffer(16, 2)
  for (let n = 1; n <= 6; n++) buffer.add(record(n), DAY)
  const batch = buffer.take(6)
  for (let n = 7; n <= 18; n++) buffer.add(record(n), DAY)
  buffer.putBack(batch)
  t.equal(buffer.dropped, 2, 'the oldest row of the three did not fit')
  t.equal(buffer.size, 16)
  t.same(ids(buffer.take(100)), ['r3,r4', 'r5,r6', 'r7,r8', 'r9,r10', 'r11,r12', 'r13,r14', 'r15,r16', 'r17,r18'])
})

t.test('a long queue taken a row at a time keeps its order as its spent front is let go', async (t) => {
  const buffer = new RowBuffer(10_000, 1)
  for (let n = 1; n <= 200; n++) buffer.add(record(n), DAY)
  const taken: string[] = []
  for (let i = 0; i < 150; i++) taken.push(...ids(buffer.take(1)))
  for (let n = 201; n <= 210; n++) buffer.add(record(n), DAY)
  taken.push(...ids(buffer.take(1_000)))
  t.same(
    taken,
    Array.from({ length: 210 }, (_, i) => `r${i + 1}`),
  )
  t.equal(buffer.size, 0)
})

t.test("a parent's requests either side of midnight fill a row of each day, not a row each", async (t) => {
  // A request that began before midnight and ended after it is recorded at its start, so records
  // of two days come in turn for a while.
  const buffer = new RowBuffer(100, 10)
  for (let n = 1; n <= 6; n++) buffer.add(record(n), n % 2 === 1 ? DAY : DAY + 1)
  const rows = buffer.take(100)
  t.same(ids(rows), ['r1,r3,r5', 'r2,r4,r6'])
  t.same(
    rows.map((row) => row.day),
    [DAY, DAY + 1],
  )

  const more = new RowBuffer(100, 2)
  more.add(record(1), DAY)
  more.add(record(2), DAY + 1)
  more.add(record(3), DAY + 1) // the newer day's row full
  more.add(record(4), DAY)
  t.same(ids(more.take(100)), ['r1,r4', 'r2,r3'], "the earlier day's row still takes its records")
})

t.test("a parent's open row dropped takes no more records: the next starts a row of its own", async (t) => {
  const buffer = new RowBuffer(16, 2) // rows of 2, 8 rows at most
  buffer.add(record(1), DAY) // the first parent's row, open
  for (let n = 2; n <= 15; n++) buffer.add(record(n, ACCOUNTS[1]), DAY)
  t.equal(buffer.dropped, 0, 'eight rows')
  buffer.add(record(16, ACCOUNTS[1]), DAY)
  t.equal(buffer.dropped, 1, "a ninth row: the oldest, the first parent's open one, went")
  buffer.add(record(17), DAY)
  t.equal(buffer.dropped, 3, "the first parent's record needs a row again: the next oldest went")
  const rows = buffer.take(100)
  t.same(ids(rows).at(-1), 'r17', "the first parent's record, in a row of its own")
  t.equal(
    rows.reduce((sum, row) => sum + row.size, 0),
    14,
    'every record taken is counted',
  )
  t.equal(buffer.size, 0)
})

t.test('rows of a record each are bounded too: their own memory counts', async (t) => {
  const capacity = 16 * ROW_WEIGHT
  const buffer = new RowBuffer(capacity, 500)
  for (let n = 1; n <= 40; n++) buffer.add(record(n, uuid(1, n)), DAY)
  t.equal(buffer.size, 16, 'capacity / ROW_WEIGHT rows of one record')
  t.equal(buffer.dropped, 24)
  t.same(
    ids(buffer.take(1_000)),
    Array.from({ length: 16 }, (_, i) => `r${i + 25}`),
    'the newest kept',
  )
})

t.test("late records (ids far below the open row's) fill a row of their own; the open row goes on", async (t) => {
  const buffer = new RowBuffer(1_000, 100)
  const made = (n: number, accountId = ACCOUNTS[0]!) => logRecord({ id: madeId(n), path: '/', accountId })
  const now = 3 * MAX_ID_SPAN
  for (const n of [now, MAX_ID_SPAN, now + 1, MAX_ID_SPAN + 5, now + 2, 0, now + MAX_ID_SPAN + 1])
    buffer.add(made(n), DAY)
  const counts = (row: RowBuilder) => row.ids().map((id) => Number.parseInt(id.slice(24), 16))
  t.same(
    buffer.take(1_000).map(counts),
    [[now, now + 1, now + 2], [MAX_ID_SPAN, MAX_ID_SPAN + 5], [0], [now + MAX_ID_SPAN + 1]],
    'the open row, its late records in theirs (a new one when they are too far apart), then the next row',
  )
  t.equal(buffer.size, 0)
})

t.test('the buffer holds so many characters of paths at most: the oldest rows go, counted', async (t) => {
  // Paths are the one field a client sizes (up to 16 KiB): 100,000 of them would outgrow a heap.
  const long = (n: number, accountId = ACCOUNTS[0]!) =>
    logRecord({ id: `r${n}`, path: `/${'a'.repeat(299)}`, accountId })
  const buffer = new RowBuffer(1_000, 2, 1_000)
  for (let n = 1; n <= 3; n++) buffer.add(long(n), DAY)
  t.equal(buffer.dropped, 0, '900 characters fit in 1,000')
  buffer.add(long(4), DAY)
  t.equal(buffer.dropped, 2, 'the fourth takes the oldest row (two records) out')
  t.same(ids(buffer.take(100)), ['r3,r4'])
  // Taken rows no longer count; put back, they count again, and what does not fit goes.
  for (let n = 5; n <= 7; n++) buffer.add(long(n, ACCOUNTS[1]), DAY)
  t.equal(buffer.dropped, 2, 'the taken rows made room')
  const batch = buffer.take(100)
  buffer.add(long(8), DAY)
  buffer.add(long(9), DAY)
  buffer.putBack(batch)
  t.equal(buffer.dropped, 4, 'of the three put back, the oldest row goes: two more dropped')
  t.same(ids(buffer.take(100)), ['r7', 'r8,r9'])
  t.equal(buffer.size, 0)
  // A record of a short path beside them is not held to the long ones' share.
  const mixed = new RowBuffer(1_000, 2, 1_000)
  for (let n = 1; n <= 50; n++) mixed.add(record(n), DAY)
  t.equal(mixed.dropped, 0, 'fifty one-character paths fit')
})

t.test('a batch takes so many characters of paths at most (one row at least)', async (t) => {
  const long = (n: number) => logRecord({ id: `r${n}`, path: `/${'a'.repeat(299)}` })
  const buffer = new RowBuffer(1_000, 1)
  for (let n = 1; n <= 4; n++) buffer.add(long(n), DAY)
  t.same(ids(buffer.take(100, 700)), ['r1', 'r2'], 'two rows of 300 fit in 700, a third does not')
  t.same(ids(buffer.take(100, 100)), ['r3'], 'a row larger than the bound goes whole')
  t.same(ids(buffer.take(100)), ['r4'], 'no bound: every row')
})

t.test('a row taken is not kept reachable by the buffer', async (t) => {
  // A full collection on demand: whether the buffer still reaches a row is then plain.
  setFlagsFromString('--expose-gc')
  const collect = runInNewContext('gc') as () => void
  const buffer = new RowBuffer(4, 1)
  const rowsOf = (n: number) => {
    buffer.add(record(n), DAY)
    return buffer.take(1)
  }
  // A row taken (as a batch is written), then rows dropped (past the bound) behind it: fewer than
  // the 64 spent places after which the queue is compacted anyway.
  const taken = new WeakRef(rowsOf(1)[0]!)
  for (let n = 2; n <= 7; n++) buffer.add(record(n), DAY)
  t.equal(buffer.dropped, 2, 'two rows dropped')
  const dropped = buffer.take(100).map((row) => row.ids().join(','))
  t.same(dropped, ['r4', 'r5', 'r6', 'r7'])
  // WeakRefs hold their target until the current job ends.
  await new Promise((resolve) => setImmediate(resolve))
  collect()
  t.equal(taken.deref(), undefined, 'a taken row is collected once its batch lets go of it')
  t.equal(buffer.size, 0)
})
