// A gated heavy read's later statements (the export's pages after the first) take a place of the
// gate each, in its parent's turn (src/management/heavy-reads.ts, heavyReadTurn).
import type { FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import t from 'tap'
import { gateHeavyReads, heavyReadTurn } from '../../src/management/heavy-reads.js'
import { FairGate } from '../../src/shared/fair-gate.js'

t.test('a later page waits for a place of the gate and gives it back; outside a gated call it just runs', async (t) => {
  const gate = new FairGate(1, 4, 1)
  const route = { config: { heavyRead: 'gated' }, handler: async () => 'first page' } as unknown as RouteOptions
  gateHeavyReads(gate)(route)
  const request = {
    deadline: { stop: new AbortController() },
    principal: { tenant: { id: 'parent' } },
  } as unknown as FastifyRequest
  t.equal(
    await (route.handler as (r: FastifyRequest, p: FastifyReply) => Promise<string>)(request, {} as FastifyReply),
    'first page',
  )
  t.equal(gate.held, 0, "the handler's place is back once it returned")

  const turn = heavyReadTurn(request)
  let inside = -1
  t.equal(
    await turn(async () => {
      inside = gate.held
      return 'later page'
    }),
    'later page',
  )
  t.equal(inside, 1, 'the later page held a place while it read')
  t.equal(gate.held, 0, 'and gave it back')

  // Another parent holds the one place: the page waits for it.
  const enter = gate.enter('other')!
  const leaveOther = await enter
  let ran = false
  const waiting = turn(async () => {
    ran = true
  })
  await new Promise((resolve) => setImmediate(resolve))
  t.notOk(ran, 'waits while the place is taken')
  leaveOther()
  await waiting
  t.ok(ran, 'runs once it is given back')

  t.equal(await heavyReadTurn({} as FastifyRequest)(async () => 'direct'), 'direct', 'no gate outside a gated call')
})
