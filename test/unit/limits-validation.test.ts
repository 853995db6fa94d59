// Limits' validation (docs/api.md, Limits and quotas): the API's schema, compiled as the app
// compiles bodies, and the CLI's parsers, against the same bounds. 1 ≤ N, M ≤ 10^9; 1 ≤ W ≤ 3600;
// both members nullable, a member left out is null, anything else refused with the field named.
import t from 'tap'
import { makeAjv } from '../../src/http/schema-compilers.js'
import { LimitsBody } from '../../src/schemas/limits.js'
import {
  limitsFromBody,
  parseMonthlyQuota,
  parseRate,
  shownLimits,
  storedLimits,
} from '../../src/shared/tenant-limits.js'

const validate = makeAjv(false).compile(LimitsBody)

/** The instance paths the schema names for `value`, or [] when it passes. */
function refusedAt(value: unknown): string[] {
  if (validate(value)) return []
  return [...new Set((validate.errors ?? []).map((e) => e.instancePath))]
}

t.test('the schema accepts every shape and bound the rules allow', async (t) => {
  for (const value of [
    {},
    { rate: null },
    { monthly_quota: null },
    { rate: null, monthly_quota: null },
    { rate: { requests: 1, per_seconds: 1 } },
    { rate: { requests: 1_000_000_000, per_seconds: 3600 } },
    { monthly_quota: { requests: 1 } },
    { monthly_quota: { requests: 1_000_000_000 } },
    { rate: { requests: 100, per_seconds: 60 }, monthly_quota: { requests: 5000 } },
  ]) {
    t.same(refusedAt(value), [], JSON.stringify(value))
  }
})

t.test('the schema refuses, naming the field', async (t) => {
  const cases: [unknown, string][] = [
    [{ rate: { requests: 0, per_seconds: 1 } }, '/rate/requests'],
    [{ rate: { requests: 1_000_000_001, per_seconds: 1 } }, '/rate/requests'],
    [{ rate: { requests: 1.5, per_seconds: 1 } }, '/rate/requests'],
    [{ rate: { requests: '10', per_seconds: 1 } }, '/rate/requests'],
    [{ rate: { requests: 10, per_seconds: 0 } }, '/rate/per_seconds'],
    [{ rate: { requests: 10, per_seconds: 3601 } }, '/rate/per_seconds'],
    [{ rate: { requests: 10 } }, '/rate'],
    [{ rate: { requests: 10, per_seconds: 1, burst: 2 } }, '/rate'],
    [{ rate: 10 }, '/rate'],
    [{ monthly_quota: { requests: 0 } }, '/monthly_quota/requests'],
    [{ monthly_quota: { requests: -1 } }, '/monthly_quota/requests'],
    [{ monthly_quota: { requests: 1e10 } }, '/monthly_quota/requests'],
    [{ monthly_quota: {} }, '/monthly_quota'],
    [{ monthly_quota: 5 }, '/monthly_quota'],
    [{ rates: null }, ''],
    [[], ''],
    ['none', ''],
  ]
  for (const [value, path] of cases) {
    const paths = refusedAt(value)
    t.ok(paths.includes(path), `${JSON.stringify(value)} refused at "${path}" (got ${JSON.stringify(paths)})`)
  }
})

t.test('a body as a whole object: left out is null; nothing set is stored as null', async (t) => {
  t.same(limitsFromBody({ rate: { requests: 5, per_seconds: 1 } }), {
    rate: { requests: 5, per_seconds: 1 },
    monthly_quota: null,
  })
  t.same(limitsFromBody({ monthly_quota: { requests: 7 } }), { rate: null, monthly_quota: { requests: 7 } })
  t.equal(limitsFromBody({}), null)
  t.equal(limitsFromBody({ rate: null, monthly_quota: null }), null)
  t.equal(limitsFromBody(null), null)
  t.equal(storedLimits({ rate: null, monthly_quota: null }), null)
  t.same(shownLimits(null), { rate: null, monthly_quota: null })
  t.same(shownLimits(undefined), { rate: null, monthly_quota: null })
})

t.test('the CLI parsers take N/Ws and M within the same bounds', async (t) => {
  t.same(parseRate('100/1s'), { requests: 100, per_seconds: 1 })
  t.same(parseRate('1/3600s'), { requests: 1, per_seconds: 3600 })
  t.same(parseRate('1000000000/60'), { requests: 1_000_000_000, per_seconds: 60 })
  t.same(parseMonthlyQuota('1000000'), { requests: 1_000_000 })
  t.same(parseMonthlyQuota('1000000000'), { requests: 1_000_000_000 })
  for (const bad of [
    '0/1s',
    '1/0s',
    '1/3601s',
    '1000000001/1s',
    '10',
    '10/s',
    '/1s',
    '-1/1s',
    '1.5/1s',
    '1e3/1s',
    '10/1m',
    '',
  ])
    t.throws(() => parseRate(bad), { name: 'LimitValueError' }, `--rate ${JSON.stringify(bad)}`)
  for (const bad of ['0', '-5', '1000000001', '1e6', '1.5', 'ten', ''])
    t.throws(() => parseMonthlyQuota(bad), { name: 'LimitValueError' }, `--monthly-quota ${JSON.stringify(bad)}`)
  t.throws(() => parseRate('0/1s'), /--rate must be N\/Ws/)
})
