// The proxy's step runner (src/proxy/pipeline.ts): steps in order, a refusal undoes what the steps
// before it took (last first), a client that leaves undoes them without an answer, and a request
// that every step passes at once is done within the hook's own call (no promise on the way).
import type { FastifyReply, FastifyRequest } from 'fastify'
import t from 'tap'
import { ABANDONED, type ProxyStep, runSteps, type Verdict } from '../../src/proxy/pipeline.js'

const request = {} as FastifyRequest
const reply = {} as FastifyReply

/** Runs the hook; resolves with what `done` got ('passed' or the error) once it is called. */
function run(steps: ProxyStep[]): { sync: boolean; outcome: Promise<string> } {
  let sync = true
  let settle: (outcome: string) => void = () => {}
  const outcome = new Promise<string>((resolve) => {
    settle = resolve
  })
  let calledAt: 'sync' | 'later' | null = null
  runSteps(steps).call(null as never, request, reply, (error?: Error) => {
    calledAt = sync ? 'sync' : 'later'
    settle(error === undefined ? 'passed' : error.message)
  })
  sync = false
  return { sync: calledAt === 'sync', outcome }
}

function step(log: string[], name: string, verdict: () => Verdict | Promise<Verdict>, undoable = true): ProxyStep {
  return {
    name,
    check: () => {
      log.push(name)
      return verdict()
    },
    ...(undoable ? { undo: () => void log.push(`undo ${name}`) } : {}),
  }
}

t.test('every step passes at once: done in the same call, in order, nothing undone', async (t) => {
  const log: string[] = []
  const { sync, outcome } = run([step(log, 'a', () => undefined), step(log, 'b', () => undefined)])
  t.ok(sync, 'done was called before the hook returned')
  t.equal(await outcome, 'passed')
  t.same(log, ['a', 'b'])
})

t.test('a refusal undoes the steps before it, last first, and not itself nor the later ones', async (t) => {
  const log: string[] = []
  const { outcome } = run([
    step(log, 'a', () => undefined),
    step(log, 'b', () => undefined, false),
    step(log, 'c', () => undefined),
    step(log, 'd', () => new Error('refused by d')),
    step(log, 'e', () => undefined),
  ])
  t.equal(await outcome, 'refused by d')
  t.same(log, ['a', 'b', 'c', 'd', 'undo c', 'undo a'])
})

t.test('a step that waits: the rest run after it, and its refusal undoes as a sync one does', async (t) => {
  const log: string[] = []
  const waited = run([
    step(log, 'a', () => undefined),
    step(log, 'b', async () => undefined),
    step(log, 'c', () => undefined),
  ])
  t.notOk(waited.sync, 'done came after the wait')
  t.equal(await waited.outcome, 'passed')
  t.same(log, ['a', 'b', 'c'])

  const refusedLog: string[] = []
  const refused = run([
    step(refusedLog, 'a', () => undefined),
    step(refusedLog, 'b', async () => new Error('later no')),
    step(refusedLog, 'c', () => undefined),
  ])
  t.equal(await refused.outcome, 'later no')
  t.same(refusedLog, ['a', 'b', 'undo a'])

  const rejectedLog: string[] = []
  const rejected = run([
    step(rejectedLog, 'a', () => undefined),
    step(rejectedLog, 'b', () => Promise.reject(new Error('store down'))),
  ])
  t.equal(await rejected.outcome, 'store down', 'a rejected promise is the refusal')
  t.same(rejectedLog, ['a', 'b', 'undo a'])
})

t.test('a step after a wait that throws is the request’s error, not an unhandled rejection', async (t) => {
  const log: string[] = []
  const { outcome } = run([
    step(log, 'a', async () => undefined),
    step(log, 'b', () => {
      throw new Error('bug in b')
    }),
  ])
  t.equal(await outcome, 'bug in b')
})

t.test('ABANDONED (the client left): what passed is undone and nothing is answered', async (t) => {
  const log: string[] = []
  let answered = false
  const hook = runSteps([
    step(log, 'a', () => undefined),
    step(log, 'b', () => undefined),
    step(log, 'c', async (): Promise<Verdict> => ABANDONED),
  ])
  hook.call(null as never, request, reply, () => {
    answered = true
  })
  await new Promise((resolve) => setImmediate(resolve))
  t.same(log, ['a', 'b', 'c', 'undo b', 'undo a'])
  t.notOk(answered, 'done was never called')
})

t.test('a step that throws (a bug) answers with its error and undoes the steps before it', async (t) => {
  for (const wait of [false, true]) {
    const log: string[] = []
    const { outcome } = run([
      step(log, 'a', () => undefined),
      step(log, 'b', () => (wait ? Promise.resolve(undefined) : undefined)),
      step(log, 'c', () => {
        throw new Error('bug in c')
      }),
      step(log, 'd', () => undefined),
    ])
    t.equal(await outcome, 'bug in c', wait ? 'after a step that waited' : 'all at once')
    t.same(log, ['a', 'b', 'c', 'undo b', 'undo a'])
  }
})
