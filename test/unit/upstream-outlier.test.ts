// Passive health on a clock the test moves (proxy/upstreams/outlier.ts): out at the
// eject_after-th failure in a row, for 30 s doubled each time up to 300 s, then one trial request;
// a success in between starts the count again; at most max_ejected_percent out at once.
import t from 'tap'
import { BASE_EJECTION_MS, MAX_EJECTION_MS, Outlier, OutlierState } from '../../src/proxy/upstreams/outlier.js'

function route(count: number, options = { ejectAfter: 5, maxEjectedPercent: 50 }) {
  const clock = { now: 1_000_000 }
  const states = Array.from({ length: count }, () => new OutlierState())
  const ejected: number[] = []
  const outlier = new Outlier(
    options,
    states,
    () => clock.now,
    (index) => ejected.push(index),
  )
  const admits = (index: number) => outlier.admits(states[index]!, clock.now)
  /** A request to `index` that fails (or succeeds), as the balancer sends it. */
  const send = (index: number, outcome: 'success' | 'failure' | 'neutral') => {
    outlier.dispatched(states[index]!, clock.now)
    outlier.settled(index, outcome)
  }
  return { clock, states, ejected, outlier, admits, send }
}

t.test('out at the fifth failure in a row; a success starts the count again', async (t) => {
  const r = route(4)
  for (let i = 0; i < 4; i++) r.send(0, 'failure')
  r.send(0, 'success')
  for (let i = 0; i < 4; i++) r.send(0, 'failure')
  r.send(0, 'neutral')
  t.ok(r.admits(0), 'four, a success, four and an abort of its own: still in')
  r.send(0, 'failure')
  t.notOk(r.admits(0), 'the fifth in a row takes it out')
  t.same(r.ejected, [0])
  t.ok(r.outlier.isEjected(r.states[0]!, r.clock.now))
})

t.test('30 s, then one trial request; a failed trial doubles the time, up to 300 s', async (t) => {
  const r = route(2)
  for (let i = 0; i < 5; i++) r.send(0, 'failure')
  const lengths: number[] = []
  for (let ejection = 0; ejection < 6; ejection++) {
    const start = r.clock.now
    r.clock.now = start + 1
    while (!r.admits(0)) r.clock.now += 1000
    lengths.push(Math.round((r.clock.now - start) / 1000) * 1000)
    // The trial: one request and no other until it settles.
    r.outlier.dispatched(r.states[0]!, r.clock.now)
    t.notOk(r.admits(0), 'one trial request at a time')
    r.outlier.settled(0, 'failure')
  }
  t.same(lengths, [30_000, 60_000, 120_000, 240_000, 300_000, 300_000])
  t.equal(BASE_EJECTION_MS, 30_000)
  t.equal(MAX_EJECTION_MS, 300_000)
})

t.test('a passed trial puts it back; after 300 s in, the back-off starts from 30 s again', async (t) => {
  const r = route(2)
  for (let i = 0; i < 5; i++) r.send(0, 'failure')
  r.clock.now += 30_000
  r.send(0, 'success')
  t.ok(r.admits(0), 'back')
  r.send(0, 'success')
  t.ok(r.admits(0), 'more than one request at a time again')
  for (let i = 0; i < 5; i++) r.send(0, 'failure')
  r.clock.now += 59_999
  t.notOk(r.admits(0), 'taken out again soon after: 60 s')
  r.clock.now += 1
  r.send(0, 'success')
  r.clock.now += MAX_EJECTION_MS
  for (let i = 0; i < 5; i++) r.send(0, 'failure')
  r.clock.now += 30_000
  t.ok(r.admits(0), 'after 300 s in, 30 s again')
})

t.test('a trial whose client left is no verdict: another request tries it', async (t) => {
  const r = route(2)
  for (let i = 0; i < 5; i++) r.send(0, 'failure')
  r.clock.now += 30_000
  r.send(0, 'neutral')
  t.ok(r.admits(0), 'still on trial, for the next request')
})

t.test('at most max_ejected_percent of the targets, rounded down, are out at once', async (t) => {
  const r = route(3)
  t.equal(r.outlier.maxEjected, 1, '50 % of 3')
  for (let i = 0; i < 5; i++) r.send(0, 'failure')
  for (let i = 0; i < 10; i++) r.send(1, 'failure')
  t.notOk(r.admits(0))
  t.ok(r.admits(1), 'the second stays in: the cap is reached')
  r.clock.now += 30_000
  r.send(0, 'success')
  r.send(1, 'failure')
  t.notOk(r.admits(1), 'once the first is back, the second goes out at its next failure')
  t.same(r.ejected, [0, 1])
  t.equal(route(1).outlier.maxEjected, 0, 'one target of one: never out (it would only panic)')
  t.equal(route(4, { ejectAfter: 1, maxEjectedPercent: 100 }).outlier.maxEjected, 4)
})

t.test('out counts the targets ejected or on trial, as they go and come back', async (t) => {
  const r = route(4, { ejectAfter: 2, maxEjectedPercent: 100 })
  t.equal(r.outlier.out, 0, 'none at the start: a pick needs no look at each target')
  for (let i = 0; i < 2; i++) r.send(0, 'failure')
  for (let i = 0; i < 2; i++) r.send(1, 'failure')
  t.equal(r.outlier.out, 2)
  r.clock.now += 30_000
  t.equal(r.outlier.out, 2, 'on trial is still out: its one trial request is marked at the pick')
  r.send(0, 'failure')
  t.equal(r.outlier.out, 2, 'a failed trial goes out again, counted once')
  r.send(1, 'neutral')
  t.equal(r.outlier.out, 2, 'a trial whose client left is no verdict')
  r.send(1, 'success')
  t.equal(r.outlier.out, 1, 'a passed trial is back')
  r.send(1, 'success')
  r.clock.now += 60_000
  r.send(0, 'success')
  t.equal(r.outlier.out, 0, 'all back')
})
