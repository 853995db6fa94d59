// The request logger (ops/logging.ts) is built on first use, and so is a child made of it (a
// sampled trace's ids): a request that logs nothing builds no pino child at all.
import pino from 'pino'
import t from 'tap'
import { lazyChildLogger } from '../../src/ops/logging.js'

t.test('a child of the request logger is built only when a line is logged, with every binding', async (t) => {
  const lines: Record<string, unknown>[] = []
  let built = 0
  // pino's onChild hears of every child made, at any depth.
  const root = pino(
    { level: 'info', onChild: () => built++ },
    { write: (line: string) => lines.push(JSON.parse(line)) },
  )
  const request = lazyChildLogger.call(null as never, root, { reqId: 'req-1' }, {}, null as never)
  const traced = request.child({ trace_id: 'abc', span_id: 'def' })
  t.equal(built, 0, 'nothing built before a line')
  traced.info('hello')
  t.equal(built, 2, 'the request logger and its child built on the first line')
  t.match(lines, [{ reqId: 'req-1', trace_id: 'abc', span_id: 'def', msg: 'hello' }])
  traced.warn('again')
  request.info('plain')
  t.equal(built, 2, 'and only then')
  t.match(lines[2], { reqId: 'req-1', msg: 'plain' })
  t.notOk('trace_id' in lines[2]!, "the parent's lines carry only its own bindings")
})
