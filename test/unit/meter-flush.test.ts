// The usage meter's flushing, without I/O (usage/meter-flush.ts): a refused batch's halves keep
// every row once, in order, under new ids; only data errors (SQLSTATE 22, 23) are split.
import t from 'tap'
import { type Batch, halves, refusedForItsData, rowCount } from '../../src/usage/meter-flush.js'

const mark = { replicaId: '00000000-0000-4000-8000-000000000001', through: new Date(0) }
const tenantId = '00000000-0000-4000-8000-000000000002'
const batch: Batch = {
  id: 'whole',
  since: 5,
  mark,
  rows: [
    { tenantId, day: '2026-11-01', statusClass: 2, requests: 1 },
    { tenantId, day: '2026-11-01', statusClass: 4, requests: 2 },
  ],
  keyRows: [{ tenantId, keyId: tenantId, day: '2026-11-01', statusClass: 2, requests: 1 }],
  unitRows: [],
  keyUnitRows: [{ tenantId, keyId: tenantId, day: '2026-11-01', meter: 'constructor', units: 3 }],
  logDropRows: [{ tenantId, periodStart: '2026-11-01T00:00:00.000Z', meter: 'requests', units: 1 }],
}

t.test('halves hold every row once, in order, under new ids, with the mark', async (t) => {
  const [first, second] = halves(batch)
  t.equal(rowCount(batch), 5)
  t.equal(rowCount(first), 3, 'the first takes the larger half')
  t.equal(rowCount(second), 2)
  t.same(first.rows, batch.rows)
  t.same(first.keyRows, batch.keyRows)
  t.same(second.keyUnitRows, batch.keyUnitRows)
  t.same(second.logDropRows, batch.logDropRows)
  t.not(first.id, batch.id)
  t.not(first.id, second.id)
  t.equal(first.mark, mark)
  t.equal(second.since, 5)
  t.equal(first.split, true, 'marked as a half')
})

t.test('only data errors are refusals', async (t) => {
  for (const code of ['22003', '23503', '23514', '22P02']) t.ok(refusedForItsData({ code }), code)
  for (const err of [{ code: '57014' }, { code: '40001' }, { code: 'ECONNRESET' }, new Error('x'), null, undefined])
    t.notOk(refusedForItsData(err), String((err as { code?: string } | null)?.code ?? err))
})
