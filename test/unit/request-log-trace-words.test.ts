// A request log row keeps its records' trace ids as words until it is written
// (request-log/trace-words.ts, rows.ts): each comes back as it went in, leading zeros and all;
// a record without one is null; an untraced row keeps no words.
import t from 'tap'
import { dayOfRecord } from '../../src/request-log/partitions.js'
import { RowBuilder } from '../../src/request-log/rows.js'
import { ACCOUNTS, logRecord, madeId } from '../helpers/request-records.js'

const rowOf = (traceIds: (string | null | undefined)[]) => {
  const now = Date.now()
  const row = new RowBuilder(ACCOUNTS[0]!, dayOfRecord(now))
  traceIds.forEach((traceId, i) => {
    const record = logRecord({ id: madeId(i), path: `/api/${i}`, timeMs: now })
    row.add(traceId === undefined ? record : { ...record, traceId })
  })
  return row
}

t.test("each record's trace id comes back, null where it had none", async (t) => {
  const ids = [
    undefined,
    null,
    '0af7651916cd43dd8448eb211c80319c',
    null,
    '00000000000000000000000000000001',
    'ffffffffffffffffffffffffffffffff',
    '4bf92f3577b34da6a3ce929d0e0e4736',
  ]
  const row = rowOf(ids)
  t.equal(row.traced, true)
  t.same(
    row.traceIds(),
    ids.map((id) => id ?? null),
  )
})

t.test('a row no record of which was traced keeps no words', async (t) => {
  const row = rowOf([undefined, null, null])
  t.equal(row.traced, false)
  t.same(row.traceWords, [])
})

t.test('what is not 32 lowercase hex digits is kept as none', async (t) => {
  const row = rowOf(['0AF7651916CD43DD8448EB211C80319C', '0af7651916cd43dd', 'zz', '0af7651916cd43dd8448eb211c80319c'])
  t.same(row.traceIds(), [null, null, null, '0af7651916cd43dd8448eb211c80319c'])
})
