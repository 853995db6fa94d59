// The request log's buffer (src/request-log/record-buffer.ts): bounded, the oldest dropped and
// counted, a failed batch taken back before the newer records, and its own excess dropped oldest first.
import t from 'tap'
import { RecordBuffer, type RequestRecord } from '../../src/request-log/record-buffer.js'

const record = (n: number) => ({ id: `r${n}` }) as RequestRecord
const ids = (records: readonly RequestRecord[]) => records.map((r) => r.id)

t.test('a full buffer drops its oldest record, and counts it', async (t) => {
  const buffer = new RecordBuffer<RequestRecord>(3)
  for (let n = 1; n <= 5; n++) buffer.add(record(n))
  t.equal(buffer.size, 3)
  t.equal(buffer.dropped, 2)
  t.same(ids(buffer.take(10)), ['r3', 'r4', 'r5'], 'the newest three, oldest first')
  t.equal(buffer.size, 0)
})

t.test('take hands out at most its batch, in order, across the ring', async (t) => {
  const buffer = new RecordBuffer<RequestRecord>(4)
  for (let n = 1; n <= 3; n++) buffer.add(record(n))
  t.same(ids(buffer.take(2)), ['r1', 'r2'])
  for (let n = 4; n <= 6; n++) buffer.add(record(n))
  t.same(ids(buffer.take(10)), ['r3', 'r4', 'r5', 'r6'], 'wrapped around the end of the array')
  t.equal(buffer.dropped, 0)
})

t.test('a batch put back goes before the records added since; what does not fit goes, oldest first', async (t) => {
  const buffer = new RecordBuffer<RequestRecord>(4)
  for (let n = 1; n <= 3; n++) buffer.add(record(n))
  const batch = buffer.take(3)
  buffer.add(record(4))
  buffer.add(record(5))
  buffer.putBack(batch)
  t.equal(buffer.dropped, 1, 'one of the three did not fit')
  t.same(ids(buffer.take(10)), ['r2', 'r3', 'r4', 'r5'])
})
