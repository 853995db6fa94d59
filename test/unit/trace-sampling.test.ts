// A request's trace is sampled by the tracer's own sampler before any span is made
// (traces/request-span.ts): the sampled ones' server spans carry the trace id the sampler decided
// on, so that a ratio sampler downstream, reading the same id, decides the same (the
// specification's TraceIdRatioBased); the unsampled ones make no span.
import { ROOT_CONTEXT } from '@opentelemetry/api'
import {
  InMemorySpanExporter,
  SamplingDecision,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from '@opentelemetry/sdk-trace'
import type { FastifyRequest } from 'fastify'
import t from 'tap'
import { ids } from '../../src/traces/ids.js'
import { startRequestTrace } from '../../src/traces/request-span.js'

function requestWith(headers: Record<string, string>): FastifyRequest {
  return {
    method: 'GET',
    url: '/v1/things/1?x=1',
    headers,
    is404: false,
    routeOptions: { url: '/v1/things/*', config: { kind: 'proxy' } },
    protocol: 'http',
    ip: '127.0.0.1',
    principal: null,
  } as unknown as FastifyRequest
}

t.test('a sampled trace is on the id its sampler decided; an unsampled one makes no span', async (t) => {
  const sampler = new TraceIdRatioBasedSampler(0.5)
  const exporter = new InMemorySpanExporter()
  const provider = new TracerProvider({
    sampler,
    idGenerator: ids,
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
  })
  const tracing = { tracer: provider.getTracer('test'), sampler }
  const decides = (traceId: string) => sampler.shouldSample(ROOT_CONTEXT, traceId).decision
  const sampled: string[] = []
  let unsampled = 0
  for (let i = 0; i < 400; i++) {
    const trace = startRequestTrace(tracing, 'continue', requestWith({}))
    if (trace.sampled) {
      sampled.push(trace.traceId)
      trace.finish(requestWith({}) as never, { statusCode: 200 } as never)
    } else {
      unsampled++
      t.equal(decides(trace.traceId), SamplingDecision.NOT_RECORD)
    }
  }
  t.ok(sampled.length > 100 && unsampled > 100, `both kinds came (${sampled.length} sampled)`)
  t.ok(
    sampled.every((traceId) => decides(traceId) === SamplingDecision.RECORD_AND_SAMPLED),
    'every sampled trace id is one the ratio samples',
  )
  const spans = exporter.getFinishedSpans()
  t.same(
    spans.map((span) => span.spanContext().traceId),
    sampled,
    'only the sampled ones made spans, on their ids',
  )
  const [first, second] = [ids.generateTraceId(), ids.generateTraceId()]
  t.not(first, second, 'no id is left to be taken again')
  await provider.shutdown()
})

t.test("a client's sampled trace is continued on its id", async (t) => {
  const sampler = new TraceIdRatioBasedSampler(0)
  const provider = new TracerProvider({ sampler, idGenerator: ids })
  const traceId = '0af7651916cd43dd8448eb211c80319c'
  const trace = startRequestTrace(
    { tracer: provider.getTracer('test'), sampler },
    'continue',
    requestWith({ traceparent: `00-${traceId}-b7ad6b7169203331-01` }),
  )
  // The ratio 0 sampler (not parent-based) drops it: no span, the client's trace id kept.
  t.equal(trace.sampled, false)
  t.equal(trace.traceId, traceId)
  await provider.shutdown()
})
