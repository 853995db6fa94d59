// Logs (docs/operations.md): pino JSON, one line per request written when the response is done, and the
// secrets of docs/api.md redacted wherever they could appear in a logged object.
import { writeSync } from 'node:fs'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import { type Bindings, type ChildLoggerOptions, type Logger, type LoggerOptions, pino } from 'pino'
import type { RouteKind } from '../http/route-kind.js'

export const LOG_REDACT = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  // A browser's WebSocket credential comes as a subprotocol (docs/api.md, WebSockets).
  'req.headers["sec-websocket-protocol"]',
  'headers["sec-websocket-protocol"]',
  'authorization',
  'api_key',
  'client_secret',
  '*.api_key',
  '*.client_secret',
  '*.authorization',
]

export const LOG_CENSOR = '[redacted]'

/** The gateway's pino options: main.ts starts with them, and the log test captures with them. */
export function loggerOptions(level: string): LoggerOptions {
  return { level, redact: { paths: LOG_REDACT, censor: LOG_CENSOR } }
}

/** Errors after which a file descriptor takes no more writes: its terminal hung up, its reader quit, it was closed. */
const GONE_FOR_GOOD = new Set(['EIO', 'EPIPE', 'EBADF'])

const STDOUT = 1

/**
 * Stdout, written asynchronously as pino does by default. Once stdout is gone for good the stream
 * writes nothing more, as pino's own destination does for EPIPE alone: otherwise the synchronous
 * flush at exit (sonic-boom 4) retries the line every 100 ms for ever, and the gateway, drained,
 * never exits (its embedded lock kept). Any other error is left to fail as before.
 */
export function stdoutDestination(): ReturnType<typeof pino.destination> {
  const stream = pino.destination({ dest: STDOUT, sync: false })
  const letGo = () => {
    const nothing = () => {}
    Object.assign(stream, {
      write: () => true,
      flushSync: nothing,
      flush: (done?: (err?: Error) => void) => done?.(),
      end: nothing,
      destroy: nothing,
    })
  }
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (!GONE_FOR_GOOD.has(err.code ?? '')) throw err
    letGo()
  })
  // The flush at exit may come before a failed write was reported: an empty write tells a hung-up
  // terminal or a closed descriptor first (not a pipe whose reader quit, which takes it).
  const flushSync = stream.flushSync.bind(stream)
  stream.flushSync = () => {
    try {
      writeSync(STDOUT, '')
    } catch (err) {
      if (GONE_FOR_GOOD.has((err as NodeJS.ErrnoException).code ?? '')) return letGo()
    }
    flushSync()
  }
  return stream
}

/**
 * Fastify gives every request a child logger, which pino builds eagerly (bindings serialized,
 * level methods set up): a few µs per request for a logger most requests never use, since the
 * request line is written by the root logger. This one builds the child on first use.
 */
class LazyChildLogger {
  private built: FastifyBaseLogger | null = null

  private readonly parent: FastifyBaseLogger
  private readonly bindings: Bindings
  private readonly options: ChildLoggerOptions
  constructor(parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions) {
    this.parent = parent
    this.bindings = bindings
    this.options = options
  }

  private real(): FastifyBaseLogger {
    if (this.built === null) {
      // A lazy parent's child() is lazy: the real child hangs off its real logger.
      const parent = this.parent instanceof LazyChildLogger ? this.parent.real() : this.parent
      this.built = parent.child(this.bindings, this.options)
    }
    return this.built
  }

  get level(): string {
    return this.built?.level ?? this.options.level ?? this.parent.level
  }
  set level(level: string) {
    this.real().level = level
  }
  fatal(...args: unknown[]): void {
    ;(this.real().fatal as (...a: unknown[]) => void)(...args)
  }
  error(...args: unknown[]): void {
    ;(this.real().error as (...a: unknown[]) => void)(...args)
  }
  warn(...args: unknown[]): void {
    ;(this.real().warn as (...a: unknown[]) => void)(...args)
  }
  info(...args: unknown[]): void {
    ;(this.real().info as (...a: unknown[]) => void)(...args)
  }
  debug(...args: unknown[]): void {
    ;(this.real().debug as (...a: unknown[]) => void)(...args)
  }
  trace(...args: unknown[]): void {
    ;(this.real().trace as (...a: unknown[]) => void)(...args)
  }
  silent(...args: unknown[]): void {
    ;(this.real().silent as (...a: unknown[]) => void)(...args)
  }
  /** Lazy too: a child made before anything is logged (a sampled trace's ids) costs nothing until used. */
  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return new LazyChildLogger(
      this as unknown as FastifyBaseLogger,
      bindings,
      options ?? {},
    ) as unknown as FastifyBaseLogger
  }
}

export const lazyChildLogger: NonNullable<FastifyServerOptions['childLoggerFactory']> = (logger, bindings, options) =>
  new LazyChildLogger(logger, bindings, options) as unknown as FastifyBaseLogger

/** The request line: who called, as whom, which route, what came of it, and how long it took. */
/**
 * The request target as a log line shows it: never its query string (the caller's, it could hold
 * anything), nor the authority of an absolute-form target (`http://user:password@host/…`, which
 * the gateway refuses but still logs), and at most 200 characters.
 */
export function loggedPath(url: string): string {
  let start = 0
  if (url.charCodeAt(0) !== 0x2f /* / */) {
    const scheme = url.indexOf('://')
    const slash = scheme === -1 ? -1 : url.indexOf('/', scheme + 3)
    if (slash === -1) return '(not a path)'
    start = slash
  }
  const query = url.indexOf('?', start)
  return url.slice(start, query === -1 ? url.length : query).slice(0, 200)
}

export function logRequest(
  log: FastifyBaseLogger,
  kind: RouteKind,
  request: FastifyRequest,
  reply: FastifyReply,
): void {
  // Probes come every few seconds from every kubelet: kept out of the info stream.
  const level = kind === 'ops' && reply.statusCode < 500 ? 'debug' : 'info'
  if (!(log as Logger).isLevelEnabled(level)) return
  const principal = request.principal
  const line: Record<string, unknown> = {
    reqId: request.id,
    method: request.method,
    path: loggedPath(request.url),
    route: request.routeOptions.url ?? null,
    kind,
    status: reply.statusCode,
    ms: Math.round(reply.elapsedTime * 100) / 100,
    callerTenant: principal?.tenant.id ?? null,
    resolvedTenant: request.actingTenant?.id ?? null,
    keyId: principal?.key.id ?? null,
  }
  // With tracing on: the request's trace, for the log's backend to open (traces/plugin.ts). Set,
  // not spread: a spread copies an object made for it into another, each line.
  const trace = request.trace
  if (trace !== null) line.trace_id = trace.traceId
  log[level](line, 'request')
}
