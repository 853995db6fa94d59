// Which onClose hooks of a test's gateway are still running, and where each was added: a close
// that does not end (helpers/gateway.ts bounds it) then names what it waits on, where tap's own
// timeout would say only that the file took too long. fastify publishes each new instance on this
// channel before any plugin runs; its plugins' instances inherit the root's addHook.
import { subscribe } from 'node:diagnostics_channel'
import type { FastifyInstance } from 'fastify'

// biome-ignore lint/suspicious/noExplicitAny: a hook of any of fastify's shapes
type AnyHook = (...args: any[]) => unknown
type AddHook = (this: FastifyInstance, name: string, hook: AnyHook) => FastifyInstance

/** Each watched root instance's onClose hooks under way: where each was added, by a number of its own. */
const running = new WeakMap<FastifyInstance, Map<number, string>>()

subscribe('fastify.initialization', (message) => {
  const { fastify } = message as { fastify: FastifyInstance }
  const underWay = new Map<number, string>()
  running.set(fastify, underWay)
  let count = 0
  const addHook = fastify.addHook as unknown as AddHook
  const watched: AddHook = function (name, hook) {
    // What fastify refuses or turns into a function itself (a disposable object) goes as it came.
    if (name !== 'onClose' || typeof hook !== 'function' || (isAsync(hook) && hook.length === 3))
      return addHook.call(this, name, hook)
    const id = count++
    const where = addedAt(new Error().stack ?? '')
    const ended = () => underWay.delete(id)
    // The same arity as the hook's (avvio passes a callback only to a hook that takes two
    // arguments), and the same outcome: a hook that returns at once, or throws, still does.
    const wrapped =
      hook.length >= 2
        ? function (this: unknown, instance: unknown, done: (err?: unknown) => void) {
            underWay.set(id, where)
            hook.call(this, instance, (err?: unknown) => {
              ended()
              done(err)
            })
          }
        : function (this: unknown, instance: unknown) {
            underWay.set(id, where)
            let result: unknown
            try {
              result = hook.call(this, instance)
            } catch (err) {
              ended()
              throw err
            }
            if (isThenable(result)) return Promise.resolve(result).finally(ended)
            ended()
            return result
          }
    return addHook.call(this, name, wrapped)
  }
  fastify.addHook = watched as unknown as FastifyInstance['addHook']
})

const isAsync = (hook: AnyHook) => hook.constructor.name === 'AsyncFunction'
const isThenable = (value: unknown): value is PromiseLike<unknown> =>
  typeof (value as { then?: unknown } | null)?.then === 'function'

/** The first frame of `stack` outside this file and the dependencies: where a hook was added. */
function addedAt(stack: string): string {
  const frame = stack
    .split('\n')
    .slice(1)
    .find(
      (line) => !line.includes('helpers/close-watch.ts') && !line.includes('node_modules') && !line.includes('node:'),
    )
  return frame?.trim().replace(/^at /, '') ?? 'unknown'
}

/** What only addHook's onClose hooks are watched leaves out. */
const NONE_WATCHED = "none watched (then a preClose hook, a plugin's own onClose() handler or the server's close)"

/**
 * What a close that has not ended waits on: its onClose hooks under way (where they were added),
 * the server's open connections, and the process's active resources by kind.
 */
export async function closeUnderWay(app: FastifyInstance): Promise<string> {
  const hooks = [...(running.get(app)?.values() ?? [])]
  const connections = await new Promise<number>((resolve) => app.server.getConnections((_, n) => resolve(n ?? -1)))
  const resources = new Map<string, number>()
  for (const kind of process.getActiveResourcesInfo()) resources.set(kind, (resources.get(kind) ?? 0) + 1)
  return [
    `onClose hooks under way: ${hooks.length === 0 ? NONE_WATCHED : hooks.join('; ')}`,
    `server: ${app.server.listening ? 'listening' : 'not listening'}, ${connections} connections open`,
    `active resources: ${[...resources].map(([kind, n]) => `${kind} ×${n}`).join(', ')}`,
  ].join('\n')
}
