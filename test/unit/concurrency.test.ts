// The slots of a proxied route (proxy/concurrency.ts) as plain logic: shares, the wait and its end.
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
