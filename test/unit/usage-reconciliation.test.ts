// Usage reconciliation's entries (usage/reconciliation.ts): each difference between the meter and
// another count is explained by its kind, and what nothing explains is flagged.
import t from 'tap'
import type { LogUnitSum } from '../../src/request-log/unit-sums.js'
import type { ReconciliationCounts } from '../../src/store/usage-reconciliation.js'
import { reconcile } from '../../src/usage/reconciliation.js'

const ACCOUNT = '00000000-0000-4000-8000-000000000001'
const SUB = '00000000-0000-4000-8000-000000000002'

const counts = (fields: Partial<ReconciliationCounts>): ReconciliationCounts => ({
  tenant_id: SUB,
  account_id: ACCOUNT,
  sub_account_id: SUB,
  meter: 'requests',
  meter_units: '10',
  closed_meter_units: '10',
  served_units: '10',
  closed_served_units: '10',
  late_units: '0',
  closed_late_units: '0',
  limiter_units: '10',
  unlimited_units: '0',
  late_out_units: '0',
  closed_late_out_units: '0',
  closed_log_dropped_units: '0',
  exported_units: '10',
  ...fields,
})
const logged = (closed: number, open = 0, tenant = SUB): LogUnitSum => ({
  account_id: ACCOUNT,
  tenant_id: tenant,
  meter: 'requests',
  closed_units: String(closed),
  open_units: String(open),
})

t.test('counts that agree have no difference', async (t) => {
  const [entry] = reconcile([counts({})], [logged(10)])
  t.same(entry, {
    account_id: ACCOUNT,
    sub_account_id: SUB,
    meter: 'requests',
    meter_units: 10,
    limiter_units: 10,
    log_units: 10,
    exported_units: 10,
    differences: [],
  })
})

t.test('each known cause is named, and the rest is unexplained', async (t) => {
  // 12 billed: 10 served here, 3 late in (2 of them into closed periods), 1 late out; 2 of its
  // records dropped; 1 open; 4 not acknowledged; and 1 of each count lost.
  const row = counts({
    meter_units: '12',
    closed_meter_units: '11',
    late_units: '3',
    closed_late_units: '2',
    served_units: '10',
    closed_served_units: '10',
    limiter_units: '7',
    unlimited_units: '2',
    late_out_units: '1',
    closed_late_out_units: '1',
    closed_log_dropped_units: '2',
    exported_units: '7',
  })
  const [entry] = reconcile([row], [logged(7, 1)])
  t.same(entry!.differences, [
    { against: 'limiter', kind: 'late', units: 2 },
    { against: 'limiter', kind: 'not_limited', units: 2 },
    { against: 'limiter', kind: 'unexplained', units: 1 },
    { against: 'log', kind: 'late', units: 1 },
    { against: 'log', kind: 'log_dropped', units: 2 },
    { against: 'log', kind: 'unexplained', units: 1 },
    { against: 'export', kind: 'open_period', units: 1 },
    { against: 'export', kind: 'not_exported', units: 4 },
  ])
  const sum = (against: string) =>
    entry!.differences.filter((d) => d.against === against).reduce((total, d) => total + d.units, 0)
  t.equal(sum('limiter'), entry!.meter_units - entry!.limiter_units!, "the limiter's differences add up")
  t.equal(sum('log'), entry!.meter_units - entry!.log_units!, "the log's add up")
  t.equal(sum('export'), entry!.meter_units - entry!.exported_units, "the export's add up")
})

t.test('no limit charged: limiter_units is null and nothing is compared', async (t) => {
  const [entry] = reconcile([counts({ limiter_units: '0', unlimited_units: '10' })], [logged(10)])
  t.equal(entry!.limiter_units, null)
  t.same(entry!.differences, [])
})

t.test('a log that does not hold the range: null, and all of it log_expired', async (t) => {
  const [entry] = reconcile([counts({})], null)
  t.equal(entry!.log_units, null)
  t.same(entry!.differences, [{ against: 'log', kind: 'log_expired', units: 10 }])
})

t.test('what the log holds and the meter never counted is unexplained', async (t) => {
  const parent = reconcile([], [logged(3, 0, ACCOUNT)])
  t.match(parent, [
    {
      sub_account_id: null,
      meter_units: 0,
      log_units: 3,
      differences: [{ against: 'log', kind: 'unexplained', units: -3 }],
    },
  ])
  t.same(reconcile([], [logged(0, 0)]), [], 'nothing of it: no entry')
})

t.test("a replica lost while serving the range: the log's difference is replica_lost, not unexplained", async (t) => {
  // The meter lost 2 of the killed replica's units, its log 3 others: the log holds 1 more.
  const row = counts({ meter_units: '8', closed_meter_units: '8', served_units: '8', closed_served_units: '8' })
  const lost = reconcile([{ ...row, limiter_units: '8', exported_units: '8' }], [logged(9)], true)
  t.same(lost[0]!.differences, [{ against: 'log', kind: 'replica_lost', units: -1 }])
  const none = reconcile([{ ...row, limiter_units: '8', exported_units: '8' }], [logged(9)], false)
  t.same(none[0]!.differences, [{ against: 'log', kind: 'unexplained', units: -1 }], 'without a loss: unexplained')
  const logOnly = reconcile([], [logged(4, 0, ACCOUNT)], true)
  t.same(
    logOnly[0]!.differences,
    [{ against: 'log', kind: 'replica_lost', units: -4 }],
    'a tenant the meter lost whole',
  )
})
