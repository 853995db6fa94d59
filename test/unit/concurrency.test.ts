// The slots of a proxied route (proxy/concurrency.ts) as plain logic: shares, the wait and its end.
import fc from 'fast-check'
import t from 'tap'
import { defaultPerTenant, RouteConcurrency, type SlotRefusal } from '../../src/proxy/concurrency.js'

/** Asks for a slot; what came of it so far: 'now', a refusal, 'waiting', then 'later' once granted. */
function ask(slots: RouteConcurrency, tenant: string | null) {
  const outcome: { value: 'now' | 'waiting' | 'later' | SlotRefusal } = { value: 'waiting' }
  const taken = slots.tryAcquire(tenant, (refusal) => {
    outcome.value = refusal ?? 'later'
  })
  if (taken) outcome.value = 'now'
  return outcome
}

t.test('a quarter per tenant, at least one', async (t) => {
  t.same([1, 2, 3, 4, 7, 8, 256].map(defaultPerTenant), [1, 1, 1, 1, 1, 2, 64])
})

t.test('a tenant at its share is refused at once; others take free slots', async (t) => {
  const slots = new RouteConcurrency(3, 2, 60_000)
  t.equal(ask(slots, 'a').value, 'now')
  t.equal(ask(slots, 'a').value, 'now')
  t.equal(ask(slots, 'a').value, 'tenant_busy', 'the third of a tenant whose share is 2')
  t.equal(ask(slots, 'b').value, 'now')
  t.equal(slots.active, 3)
  slots.release('a')
  t.equal(ask(slots, 'a').value, 'now', 'a share given back can be taken again')
})

t.test('a full route: waiters in order, each gets a slot given back', async (t) => {
  const slots = new RouteConcurrency(1, 1, 60_000)
  t.equal(ask(slots, 'a').value, 'now')
  const b = ask(slots, 'b')
  const c = ask(slots, null)
  t.same([b.value, c.value], ['waiting', 'waiting'])
  t.equal(slots.waiting, 2)
  t.equal(ask(slots, 'b').value, 'tenant_busy', 'a waiting request counts in its tenant share')
  slots.release('a')
  t.same([b.value, c.value], ['later', 'waiting'], 'the oldest waiter first')
  t.equal(slots.active, 1, 'the slot went from one to the other')
  slots.release('b')
  t.equal(c.value, 'later')
  slots.release(null)
  t.equal(slots.active, 0)
  t.equal(ask(slots, 'b').value, 'now', 'nothing is left held')
  const d = ask(slots, 'd')
  t.equal(d.value, 'waiting', 'a new request waits behind nobody but the holder')
  slots.release('b')
  t.equal(d.value, 'later')
})

t.test('a wait ends at maxWaitMs with route_busy, and its share is given back', async (t) => {
  t.plan(4)
  const slots = new RouteConcurrency(1, 1, 20)
  t.equal(ask(slots, 'a').value, 'now')
  const b = ask(slots, 'b')
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.equal(b.value, 'route_busy')
  t.equal(slots.waiting, 0)
  slots.release('a')
  t.equal(ask(slots, 'b').value, 'now', "b's share was given back when its wait ended")
})

t.test('any sequence of requests and releases keeps the limits and gives every slot back', async (t) => {
  const tenants = ['a', 'b', 'c', null]
  const step = fc.oneof(
    fc.record({ kind: fc.constant('ask' as const), tenant: fc.constantFrom(...tenants) }),
    fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
  )
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 5 }),
      fc.integer({ min: 1, max: 5 }),
      fc.array(step, { maxLength: 60 }),
      (max, share, steps) => {
        const perTenant = Math.min(share, max)
        const slots = new RouteConcurrency(max, perTenant, 3_600_000)
        const holding: (string | null)[] = []
        const waiting: { tenant: string | null; granted: boolean; calls: number }[] = []
        const check = () => {
          if (slots.active > max) throw new Error(`active ${slots.active} over ${max}`)
          for (const tenant of ['a', 'b', 'c']) {
            const held = holding.filter((h) => h === tenant).length
            const queued = waiting.filter((w) => w.tenant === tenant && !w.granted).length
            if (held + queued > perTenant)
              throw new Error(`${tenant} holds ${held} and waits ${queued}, share ${perTenant}`)
          }
          if (slots.waiting > 0 && slots.active !== max) throw new Error('a request waits while a slot is free')
          if (slots.active !== holding.length) throw new Error(`active ${slots.active}, holders ${holding.length}`)
        }
        for (const s of steps) {
          if (s.kind === 'ask') {
            const entry = { tenant: s.tenant, granted: false, calls: 0 }
            const taken = slots.tryAcquire(s.tenant, (refusal) => {
              entry.calls++
              if (refusal === null) {
                entry.granted = true
                holding.push(s.tenant)
              }
            })
            if (taken) holding.push(s.tenant)
            else if (entry.calls === 0) waiting.push(entry)
          } else if (holding.length > 0) {
            const [tenant] = holding.splice(s.pick % holding.length, 1)
            slots.release(tenant!)
          }
          check()
        }
        while (holding.length > 0) {
          slots.release(holding.shift()!)
          check()
        }
        if (slots.active !== 0 || slots.waiting !== 0) throw new Error('slots left held after every release')
        if (waiting.some((w) => w.calls !== 1 || !w.granted)) throw new Error('a waiter was not answered exactly once')
      },
    ),
    { numRuns: 500 },
  )
  t.pass('500 random runs')
})
