// The fair gate (src/shared/fair-gate.ts): a fixed number of places, an owner's calls bounded,
// and a freed place given to the owner whose turn it is, never twice to one while another waits.
import t from 'tap'
import { FairGate, type Leave } from '../../src/shared/fair-gate.js'

/** Enters and records the order in which calls get their place. */
function recorder(gate: FairGate) {
  const order: string[] = []
  const leaves = new Map<string, Leave>()
  const enter = (owner: string, name: string, signal?: AbortSignal) => {
    const entering = gate.enter(owner, signal)
    if (entering === null) return null
    return entering.then((leave) => {
      order.push(name)
      leaves.set(name, leave)
      return leave
    })
  }
  return { order, enter, leave: (name: string) => leaves.get(name)!() }
}

const turn = () => new Promise((resolve) => setImmediate(resolve))

t.test('places go to owners in turn: one flooding owner never holds a place twice while another waits', async (t) => {
  const gate = new FairGate(1, 20)
  const { order, enter, leave } = recorder(gate)
  void enter('a', 'a1')
  // a asks ten times before b asks once, then c.
  for (let i = 2; i <= 10; i++) void enter('a', `a${i}`)
  void enter('b', 'b1')
  void enter('b', 'b2')
  void enter('c', 'c1')
  await turn()
  t.same(order, ['a1'])
  t.equal(gate.waiting, 12)
  for (const name of ['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'a4']) {
    leave(name)
    await turn()
  }
  t.same(order, ['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'a4', 'a5'], 'round robin between owners, FIFO within one')
})

t.test('several places: the owner holding fewest goes first, then the one served longest ago', async (t) => {
  const gate = new FairGate(3, 4)
  const { order, enter, leave } = recorder(gate)
  for (const name of ['a1', 'a2', 'a3', 'a4']) void enter('a', name)
  await turn()
  t.same(order, ['a1', 'a2', 'a3'], 'free places are taken at once')
  t.equal(gate.waiting, 1)
  t.equal(enter('a', 'a5'), null, 'an owner with perOwner calls in the gate is refused at once')
  void enter('b', 'b1')
  void enter('c', 'c1')
  leave('a1')
  await turn()
  leave('a2')
  await turn()
  t.same(order, ['a1', 'a2', 'a3', 'b1', 'c1'], 'b and c, holding none, before a, who holds one')
  t.equal(gate.held, 3)
  t.equal(gate.waiting, 1, "a's fourth still waits")
  leave('a3')
  await turn()
  t.same(order.at(-1), 'a4')
})

t.test('a waiter whose signal aborts leaves the line; a place given back twice counts once', async (t) => {
  const gate = new FairGate(1, 2)
  const { order, enter, leave } = recorder(gate)
  void enter('a', 'a1')
  const late = new AbortController()
  const waiting = enter('b', 'b1', late.signal)!
  void enter('c', 'c1')
  late.abort(new Error('deadline'))
  await t.rejects(waiting, /deadline/, 'rejects with the signal reason')
  t.equal(gate.waiting, 1)
  leave('a1')
  leave('a1')
  await turn()
  t.same(order, ['a1', 'c1'])
  t.equal(gate.held, 1, 'the second leave changed nothing')
  await t.rejects(gate.enter('d', AbortSignal.abort(new Error('gone')))!, /gone/, 'an aborted signal never waits')
  t.equal(enter('b', 'b2') !== null, true, "b's aborted call left the gate: b may enter again")
  leave('c1')
  await turn()
  t.same(order, ['a1', 'c1', 'b2'])
  leave('b2')
  t.equal(gate.held, 0)
  t.equal(gate.waiting, 0)
})

t.test('an owner holds at most holdPerOwner places; its other calls wait without keeping others out', async (t) => {
  const gate = new FairGate(4, 8, 2)
  const { order, enter, leave } = recorder(gate)
  for (const name of ['a1', 'a2', 'a3', 'a4']) void enter('a', name)
  await turn()
  t.same(order, ['a1', 'a2'], 'two places held, two calls waiting, two places free')
  t.equal(gate.waiting, 2)
  void enter('b', 'b1')
  await turn()
  t.same(order, ['a1', 'a2', 'b1'], "another owner takes a free place at once, past a's waiting calls")
  leave('a1')
  await turn()
  t.same(order, ['a1', 'a2', 'b1', 'a3'], "a's next call takes the place a gave back")
  // a2, a3 and a4 are in the gate: five more make eight, and a ninth is refused.
  for (let i = 5; i <= 9; i++) t.not(enter('a', `a${i}`), null)
  t.equal(enter('a', 'a10'), null, 'a ninth call of one owner in the gate is refused at once')
})

t.test('a call whose signal has aborted before it enters leaves no trace of its owner', async (t) => {
  const gate = new FairGate(1, 1)
  const owners = (gate as unknown as { owners: Map<string, unknown> }).owners
  await t.rejects(gate.enter('late', AbortSignal.abort(new Error('gone')))!, /gone/)
  t.equal(owners.size, 0)
})
