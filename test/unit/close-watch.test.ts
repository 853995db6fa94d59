// The tests' close watch (helpers/close-watch.ts): a close that does not end names the onClose
// hooks it waits on, async or with a callback, and where each was added; none once they end.
import Fastify from 'fastify'
import t from 'tap'
import { closeUnderWay } from '../helpers/close-watch.js'
import { sleep } from '../helpers/poll.js'

t.test('a close names the hooks it waits on, then none', async (t) => {
  const app = Fastify()
  let endAsync = () => {}
  let endCallback = () => {}
  const asyncHookDone = new Promise<void>((resolve) => (endAsync = resolve))
  app.addHook('onClose', async () => {
    await asyncHookDone
  })
  app.addHook('onClose', (_instance, done) => {
    endCallback = done
  })
  app.addHook('onClose', async () => {})
  await app.ready()

  let closed = false
  const closing = app.close().then(() => (closed = true))
  await sleep(50)
  // Hooks run last added first: the callback's, which holds the async one back.
  let underWay = await closeUnderWay(app)
  t.match(underWay, /onClose hooks under way: [^\n]*close-watch\.test\.ts:16/, 'the callback hook, by its line')
  t.notMatch(underWay, /close-watch\.test\.ts:(13|19)/, 'not the hook that ended, nor the one not begun')
  endCallback()
  await sleep(50)
  underWay = await closeUnderWay(app)
  t.match(underWay, /onClose hooks under way: [^\n]*close-watch\.test\.ts:13/, 'then the async hook')
  t.notOk(closed, 'the close waits on it')
  endAsync()
  await closing
  t.match(await closeUnderWay(app), /onClose hooks under way: none watched/, 'none once the close ends')
  t.match(await closeUnderWay(app), /server: not listening, 0 connections open/)
})

t.test(
  'what fastify refuses or makes a hook of itself, and a hook that returns at once, behave as unwatched',
  async (t) => {
    const app = Fastify()
    t.throws(
      // biome-ignore lint/suspicious/noExplicitAny: a shape fastify's types rule out, as a plugin might still pass it
      () => app.addHook('onClose', (async (_a: unknown, _b: unknown, _c: unknown) => {}) as any),
      { code: 'FST_ERR_HOOK_INVALID_ASYNC_HANDLER' },
      'an async hook that also takes a callback is refused when added',
    )
    let disposed = false
    const disposable = {
      [Symbol.asyncDispose]: async () => {
        disposed = true
      },
    }
    // biome-ignore lint/suspicious/noExplicitAny: fastify 5 takes a disposable object as an onClose hook
    app.addHook('onClose', disposable as any)
    let ranAtOnce = false
    app.addHook('onClose', () => {
      ranAtOnce = true
    })
    await app.ready()
    await app.close()
    t.ok(disposed, 'a disposable object is disposed at close')
    t.ok(ranAtOnce, 'a hook that returns at once ran')
    t.match(await closeUnderWay(app), /onClose hooks under way: none watched/)
  },
)
