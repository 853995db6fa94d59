// The balancers of proxy/upstreams/balancers.ts as plain functions: smooth weighted round robin
// exact per round, power of two choices away from load, rendezvous hashing stable per tenant and
// moving only a lost target's tenants.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import { type Balanced, hashString, leastRequest, roundRobin, tenantHash } from '../../src/proxy/upstreams/balancers.js'

function targets(weights: number[], inFlight: number[] = []): (Balanced & { name: number; inFlight: number })[] {
  return weights.map((weight, name) => ({
    name,
    weight,
    inFlight: inFlight[name] ?? 0,
    current: 0,
    seed: hashString(`http://t${name}:80`),
  }))
}

t.test('round_robin: each target its weight per round, spread out', async (t) => {
  const list = targets([5, 1, 1])
  const balancer = roundRobin()
  const order = Array.from({ length: 7 }, () => balancer.pick(list, undefined).name)
  t.same(order, [0, 0, 1, 0, 2, 0, 0], "nginx's smooth order: a, a, b, a, c, a, a")
  const many = targets([1, 2, 3, 1000])
  const counts = [0, 0, 0, 0]
  for (let i = 0; i < 1006 * 7; i++) counts[balancer.pick(many, undefined).name]!++
  t.same(counts, [7, 14, 21, 7000], 'exact over whole rounds')
})

t.test('least_request: of two different targets, the one with fewer in flight for its weight', async (t) => {
  const two = targets([1, 1], [3, 0])
  for (let i = 0; i < 100; i++) t.equal(leastRequest.pick(two, undefined).name, 1)
  const weighted = targets([4, 1], [3, 1])
  for (let i = 0; i < 100; i++) t.equal(leastRequest.pick(weighted, undefined).name, 0, '(3 + 1) / 4 < (1 + 1) / 1')
  t.equal(leastRequest.pick(targets([1]), undefined).name, 0)
  const idle = targets([1, 1, 1, 1])
  const seen = new Set<number>()
  for (let i = 0; i < 400; i++) seen.add(leastRequest.pick(idle, undefined).name)
  t.equal(seen.size, 4, 'idle targets all get requests')
})

t.test('tenant_hash: a tenant on one target; losing one moves only its tenants', async (t) => {
  const list = targets([1, 1, 1, 1])
  const tenants = Array.from({ length: 400 }, () => randomUUID())
  const before = tenants.map((tenant) => tenantHash.pick(list, tenant).name)
  t.same(
    tenants.map((tenant) => tenantHash.pick(list, tenant).name),
    before,
    'the same target every time',
  )
  const spread = [0, 1, 2, 3].map((n) => before.filter((b) => b === n).length)
  t.ok(
    spread.every((n) => n > 40),
    `spread over all four (${spread})`,
  )
  const without = list.filter((target) => target.name !== 2)
  tenants.forEach((tenant, i) => {
    const after = tenantHash.pick(without, tenant).name
    if (before[i] !== 2) t.equal(after, before[i], 'stays')
    else t.not(after, 2)
  })
  const heavy = targets([1, 9])
  const onHeavy = tenants.filter((tenant) => tenantHash.pick(heavy, tenant).name === 1).length
  t.ok(onHeavy > 300, `weights hold: ${onHeavy} of 400 on the target of weight 9`)
  t.equal(tenantHash.pick(targets([1, 1], [5, 0]), undefined).name, 1, 'no tenant: least_request')
})

t.test('tenant_hash with one target left: that one', async (t) => {
  t.equal(tenantHash.pick(targets([3]), randomUUID()).name, 0)
})
