// The traces plugin (docs/operations.md, Traces): with tracing on, a span for every request from
// its first hook, its ids in the request's log lines, and the SDK flushed at the stop within its
// bound. With tracing off it loads none of the SDK and adds no hook: `request.trace` stays null.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { Counter } from 'prom-client'
import type { TraceSettings } from '../config-traces.js'
import '../shared/request-trace.js'

export interface TracesOptions {
  /** null: tracing is off. */
  settings: TraceSettings | null
  /** How long the stop waits for the last spans to be sent, in ms; past it they are lost. */
  flushBoundMs: number
}

/** The stop's wait for the last spans, in ms: within the 10 s the stop keeps past SHUTDOWN_TIMEOUT_MS (start.ts). */
export const TRACE_FLUSH_BOUND_MS = 5_000

export const tracesPlugin = fp<TracesOptions>(
  async (app: FastifyInstance, { settings, flushBoundMs }) => {
    app.decorateRequest('trace', null)
    const dropped = new Counter({
      name: 'tgw_trace_spans_dropped_total',
      help: 'Spans lost before a collector took them: the batch queue was full, or an export failed or timed out',
      registers: [app.metrics.registry],
    })
    if (settings === null) return
    // Loaded here, not imported above: a gateway that does not trace never loads the SDK.
    const { startTracing } = await import('./tracer.js')
    const { startRequestTrace } = await import('./request-span.js')
    const tracing = startTracing(settings, (spans) => dropped.inc(spans))
    const clientContext = settings.clientContext
    app.addHook('onRequest', (request, _reply, done) => {
      const trace = startRequestTrace(tracing, clientContext, request)
      request.trace = trace
      // Every line a sampled request logs names its trace (and its server span) for the log's
      // backend. An unsampled one has no trace to open: no second logger (its request line still
      // carries trace_id, ops/logging.ts).
      if (trace.sampled) request.log = request.log.child({ trace_id: trace.traceId, span_id: trace.spanId })
      done()
    })
    app.addHook('onClose', async () => {
      await tracing.shutdown(flushBoundMs)
    })
  },
  { name: 'traces', dependencies: ['metrics'] },
)
