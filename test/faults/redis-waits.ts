// Time spent waiting on Redis, per request, measured inside the gateway.
import { AsyncLocalStorage } from 'node:async_hooks'
import diagnostics from 'node:diagnostics_channel'
import type { IncomingMessage } from 'node:http'
import type { FastifyInstance } from 'fastify'

/** The commands a lookup awaits; writes to Redis (a fill storing what it read) are not awaited. */
const READ_COMMANDS = new Set(['get', 'mget', 'hget', 'hmget', 'hgetall', 'exists'])

/** What one request spent on the Redis commands it awaited (reads: the cache lookups). */
export interface RedisWait {
  ms: number
  commands: number
}

const requestContext = new AsyncLocalStorage<RedisWait>()
let tracing = false

interface TraceContext {
  command?: string
  waitStart?: number
  wait?: RedisWait
}

/**
 * ioredis publishes every command on the `ioredis:command` tracing channel (diagnostics_channel);
 * each is timed here from the moment it is written to the moment its promise settles (answered,
 * failed or timed out), and added to the request that issued it. Commands refused at once (Redis
 * not connected, no offline queue) are not written, so not traced: they cost no wait.
 */
function traceRedisCommands(): void {
  if (tracing) return
  tracing = true
  diagnostics.tracingChannel<TraceContext, TraceContext>('ioredis:command').subscribe({
    start(context) {
      const wait = requestContext.getStore()
      if (wait === undefined || !READ_COMMANDS.has(context.command ?? '')) return
      context.wait = wait
      context.waitStart = performance.now()
    },
    end() {},
    asyncStart() {},
    error() {},
    asyncEnd(context) {
      if (context.wait === undefined || context.waitStart === undefined) return
      context.wait.ms += performance.now() - context.waitStart
      context.wait.commands++
    },
  })
}

/**
 * Starts measuring, for every request `app` serves from now on, the time it waited on Redis.
 * Returns the measurements by request id (the X-Request-Id the client sent).
 */
export function measureRedisWaits(app: FastifyInstance): Map<string, RedisWait> {
  traceRedisCommands()
  const waits = new Map<string, RedisWait>()
  // Before fastify's own listener: the request runs, to its end, in this context.
  // Keyed by the X-Request-Id the client sent (timedCall sends one), which the gateway keeps.
  app.server.prependListener('request', (request: IncomingMessage) => {
    const wait: RedisWait = { ms: 0, commands: 0 }
    requestContext.enterWith(wait)
    const id = request.headers['x-request-id']
    if (typeof id === 'string') waits.set(id, wait)
  })
  return waits
}
