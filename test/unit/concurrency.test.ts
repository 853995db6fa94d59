// The slots of a proxied route (proxy/concurrency.ts) as plain logic: shares, the wait and its end.
import fc from 'fast-check'
import t from 'tap'
import {
  defaultPerAccount,
  defaultPerTenant,
  RouteConcurrency,
  type SlotCallback,
  type SlotHolder,
  type SlotRefusal,
} from '../../src/proxy/concurrency.js'

/** A tenant that is its own account (a parent acting as itself), or null on a public route. */
const holder = (tenant: string | null): SlotHolder | null =>
  tenant === null ? null : { tenantId: tenant, accountId: `account of ${tenant}` }

/** take(), then wait() when told to, as the slot step does: a refusal is told to the callback at once. */
function tryAcquire(
  slots: RouteConcurrency,
  who: SlotHolder | null,
  callback: SlotCallback,
): 'taken' | 'refused' | 'waiting' {
  const attempt = slots.take(who)
  if (attempt === 'taken') return 'taken'
  if (attempt === 'wait') {
    slots.wait(who, callback)
    return 'waiting'
  }
  callback(attempt)
  return 'refused'
}

/** Asks for a slot; what came of it so far: 'now', a refusal, 'waiting', then 'later' once granted. */
function ask(slots: RouteConcurrency, tenant: string | SlotHolder | null) {
  const outcome: { value: 'now' | 'waiting' | 'later' | SlotRefusal } = { value: 'waiting' }
  const attempt = tryAcquire(
    slots,
    typeof tenant === 'string' || tenant === null ? holder(tenant) : tenant,
    (refusal) => {
      outcome.value = refusal ?? 'later'
    },
  )
  if (attempt === 'taken') outcome.value = 'now'
  return outcome
}

t.test('a quarter per tenant, at least one', async (t) => {
  t.same([1, 2, 3, 4, 7, 8, 256].map(defaultPerTenant), [1, 1, 1, 1, 1, 2, 64])
})

t.test('half per account, at least one', async (t) => {
  t.same([1, 2, 3, 4, 7, 8, 256].map(defaultPerAccount), [1, 1, 1, 2, 3, 4, 128])
})

t.test("a parent's sub-accounts share its account's share: more sub-accounts buy no more", async (t) => {
  const slots = new RouteConcurrency(4, 1, 2, 60_000)
  const sub = (n: number): SlotHolder => ({ tenantId: `sub ${n}`, accountId: 'parent' })
  t.equal(ask(slots, sub(1)).value, 'now')
  t.equal(ask(slots, sub(2)).value, 'now')
  t.equal(ask(slots, sub(3)).value, 'account_busy', 'a third sub-account of the same parent')
  t.equal(ask(slots, sub(1)).value, 'tenant_busy', 'a tenant at its own share is told so first')
  t.equal(ask(slots, { tenantId: 'other', accountId: 'other' }).value, 'now', 'another parent is served')
  slots.release(sub(1))
  t.equal(ask(slots, sub(3)).value, 'now', 'an account share given back can be taken again')
  t.equal(slots.active, 3)
})

t.test('a tenant at its share is refused at once; others take free slots', async (t) => {
  const slots = new RouteConcurrency(3, 2, 3, 60_000)
  t.equal(ask(slots, 'a').value, 'now')
  t.equal(ask(slots, 'a').value, 'now')
  t.equal(ask(slots, 'a').value, 'tenant_busy', 'the third of a tenant whose share is 2')
  t.equal(ask(slots, 'b').value, 'now')
  t.equal(slots.active, 3)
  slots.release(holder('a'))
  t.equal(ask(slots, 'a').value, 'now', 'a share given back can be taken again')
})

t.test('a full route: waiters in order, each gets a slot given back', async (t) => {
  const slots = new RouteConcurrency(1, 1, 1, 60_000, 10)
  t.equal(ask(slots, 'a').value, 'now')
  const b = ask(slots, 'b')
  const c = ask(slots, null)
  t.same([b.value, c.value], ['waiting', 'waiting'])
  t.equal(slots.waiting, 2)
  t.equal(ask(slots, 'b').value, 'tenant_busy', 'a waiting request counts in its tenant share')
  slots.release(holder('a'))
  t.same([b.value, c.value], ['later', 'waiting'], 'the oldest waiter first')
  t.equal(slots.active, 1, 'the slot went from one to the other')
  slots.release(holder('b'))
  t.equal(c.value, 'later')
  slots.release(holder(null))
  t.equal(slots.active, 0)
  t.equal(ask(slots, 'b').value, 'now', 'nothing is left held')
  const d = ask(slots, 'd')
  t.equal(d.value, 'waiting', 'a new request waits behind nobody but the holder')
  slots.release(holder('b'))
  t.equal(d.value, 'later')
})

t.test('a wait ends at maxWaitMs with route_busy, and its share is given back', async (t) => {
  t.plan(4)
  const slots = new RouteConcurrency(1, 1, 1, 20)
  t.equal(ask(slots, 'a').value, 'now')
  const b = ask(slots, 'b')
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.equal(b.value, 'route_busy')
  t.equal(slots.waiting, 0)
  slots.release(holder('a'))
  t.equal(ask(slots, 'b').value, 'now', "b's share was given back when its wait ended")
})

t.test('a waiter that withdraws leaves the queue and gives its share back, and is never called', async (t) => {
  const slots = new RouteConcurrency(1, 1, 1, 60_000)
  t.equal(ask(slots, 'a').value, 'now')
  let called = false
  const callback = () => {
    called = true
  }
  t.equal(tryAcquire(slots, holder('b'), callback), 'waiting')
  t.equal(ask(slots, 'b').value, 'tenant_busy', 'while it waits, it holds its share')
  slots.withdraw(callback)
  t.equal(slots.waiting, 0)
  const b = ask(slots, 'b')
  t.equal(b.value, 'waiting', 'its share is free again')
  slots.release(holder('a'))
  t.equal(b.value, 'later')
  t.notOk(called, 'the withdrawn one was never called')
  slots.withdraw(callback)
  t.equal(slots.active, 1, 'withdrawing twice, or after a grant, changes nothing')
})

t.test('at most maxWaiting wait; more are route_busy at once', async (t) => {
  const slots = new RouteConcurrency(1, 1, 1, 60_000, 2)
  t.equal(ask(slots, null).value, 'now')
  const waiters = [ask(slots, null), ask(slots, null)]
  t.equal(ask(slots, null).value, 'route_busy', 'the third waiter is refused at once')
  t.equal(ask(slots, 'x').value, 'route_busy', "and a tenant's is too")
  t.equal(ask(slots, 'x').value, 'route_busy', 'without keeping its share')
  slots.release(holder(null))
  slots.release(holder(null))
  slots.release(holder(null))
  t.same(
    waiters.map((w) => w.value),
    ['later', 'later'],
  )
  t.equal(slots.active, 0)
})

t.test('100,000 waiters that give their slot back at once are served by a loop, not a call chain', async (t) => {
  const slots = new RouteConcurrency(1, 1, 1, 60_000, 200_000)
  t.equal(ask(slots, null).value, 'now')
  let served = 0
  for (let i = 0; i < 100_000; i++) {
    tryAcquire(slots, holder(null), (refusal) => {
      if (refusal !== null) return
      served++
      slots.release(holder(null))
    })
  }
  slots.release(holder(null))
  t.equal(served, 100_000, 'every waiter got the slot in turn, without a stack overflow')
  t.equal(slots.active, 0)
  t.equal(slots.waiting, 0)
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
        const slots = new RouteConcurrency(max, perTenant, max, 3_600_000, 1_000)
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
            const taken = tryAcquire(slots, holder(s.tenant), (refusal) => {
              entry.calls++
              if (refusal === null) {
                entry.granted = true
                holding.push(s.tenant)
              }
            })
            if (taken === 'taken') holding.push(s.tenant)
            else if (taken === 'waiting') waiting.push(entry)
          } else if (holding.length > 0) {
            const [tenant] = holding.splice(s.pick % holding.length, 1)
            slots.release(holder(tenant!))
          }
          check()
        }
        while (holding.length > 0) {
          slots.release(holder(holding.shift()!))
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
