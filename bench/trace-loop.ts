// Issue 84's two trace costs measured apart, in loops in this process, no network (bench/README.md,
// bench:trace-loop). Part 1, what an unsampled request (99 in 100 at 0.01) pays each piece of its
// trace: the client context read, the route's name, the trace id, the sampler, the upstream's
// `traceparent` (made, and written into undici's request), the request log line's `trace_id`, and
// the traces plugin's onRequest hook; on a real fastify request. Part 2, the official SDK's own
// floor per span: `startSpan`, the attributes request-span.ts sets, `end`, through a
// BatchSpanProcessor into the official OTLP exporter, its serializer included, its transport
// replaced by one that answers at once (protobuf, and JSON beside it).
import { Writable } from 'node:stream'
import { Worker } from 'node:worker_threads'
import { ROOT_CONTEXT, SpanKind, type Tracer } from '@opentelemetry/api'
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer'
import { resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOnSampler,
  BatchSpanProcessor,
  InMemorySpanExporter,
  ParentBasedSampler,
  SimpleSpanProcessor,
  type SpanExporter,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from '@opentelemetry/sdk-trace'
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify'
import { pino } from 'pino'
import { createRequire } from 'node:module'
import { logRequest, loggerOptions } from '../src/ops/logging.js'
import { CopyBuffer } from '../src/request-log/copy-format.js'
import type { RequestTrace } from '../src/shared/request-trace.js'
import { ids } from '../src/traces/ids.js'
import { type RequestSpan, startRequestTrace } from '../src/traces/request-span.js'
import { envInt, median, reportHead, run } from './lib.js'

/** undici's own request (not exported): it checks and joins the headers it will write. */
const require = createRequire(import.meta.url)
/** fastify's runner of a route's onRequest hooks (not exported either). */
const { onRequestHookRunner } = require('fastify/lib/hooks.js') as {
  onRequestHookRunner: (
    hooks: ((request: FastifyRequest, reply: FastifyReply, done: () => void) => void)[],
    request: FastifyRequest,
    reply: FastifyReply,
    done: () => void,
  ) => void
}
const UndiciRequest = require('undici/lib/core/request.js') as new (
  origin: string,
  options: object,
  handler: object,
) => { headers: string }

const ROUNDS = envInt('BENCH_ROUNDS', 7)
const CALLS = envInt('BENCH_CALLS', 200_000)
const SPANS = envInt('BENCH_SPANS', 50_000)
/** The gateway's onRequest hooks besides the traces plugin's (request id, tenancy, limits…), about. */
const OTHER_HOOKS = 6

/** Something each loop writes to, so that no call is optimized away. */
let sink = 0

/** The headers a client of bench:proxy sends (autocannon's, a key, the acting header). */
const CLIENT_HEADERS = {
  host: '127.0.0.1:3000',
  'user-agent': 'autocannon/8',
  accept: '*/*',
  authorization: 'Bearer tgw_live_0123456789abcdef0123456789abcdef',
  'x-acting-tenant': '3f1d2c4e-1111-4222-8333-444455556666',
}

/**
 * The process's CPU time (user and system, every thread: the garbage collector's helpers too) in
 * ns: on a machine others load, wall-clock time counts their turns on the cores as ours.
 */
function cpuNs(): number {
  const { user, system } = process.cpuUsage()
  return (user + system) * 1000
}

/** Nanoseconds of CPU a call of each side, per round, the sides in turn, the first round uncounted. */
function loops(sides: Record<string, () => void>, calls = CALLS): Map<string, number[]> {
  const out = new Map<string, number[]>(Object.keys(sides).map((name) => [name, []]))
  for (let round = 0; round <= ROUNDS; round++)
    for (const [name, fn] of Object.entries(sides)) {
      const started = cpuNs()
      for (let i = 0; i < calls; i++) fn()
      if (round > 0) out.get(name)!.push((cpuNs() - started) / calls)
    }
  return out
}

function lines(results: Map<string, number[]>, unit: 'ns' | 'µs' = 'ns', digits = unit === 'ns' ? 0 : 2): string[] {
  const scale = unit === 'ns' ? 1 : 1e-3
  return [...results].map(
    ([name, rounds]) =>
      `  ${name.padEnd(58)} ${(median(rounds) * scale).toFixed(digits).padStart(7)} ${unit} (median; rounds ${rounds.map((r) => (r * scale).toFixed(digits)).join(', ')})`,
  )
}

/** One real fastify request and its reply, caught in a proxied route's handler. */
async function aRequest(): Promise<{ request: FastifyRequest; reply: FastifyReply }> {
  const app = Fastify()
  let caught: { request: FastifyRequest; reply: FastifyReply } | null = null
  app.get('/v1/things/*', { config: { kind: 'proxy' } as never }, async (request, reply) => {
    caught = { request, reply }
    return 'ok'
  })
  await app.inject({ url: '/v1/things/1?page=2', headers: CLIENT_HEADERS })
  await app.close()
  const { request, reply } = caught!
  Object.assign(request, { trace: null, principal: null, actingTenant: null })
  return { request, reply }
}

/** Part 1: the unsampled request's pieces. */
async function unsampled(): Promise<string[]> {
  const { request, reply } = await aRequest()
  const sampler = new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(0.01) })
  // A tracer that never samples: what startRequestTrace does for 99 in 100 at 0.01, every call.
  const never = new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(0) })
  const provider = new TracerProvider({ sampler: never, idGenerator: ids })
  const tracing = { tracer: provider.getTracer('bench'), sampler: never }
  const { W3CTraceContextPropagator } = await import('@opentelemetry/core')
  const { defaultTextMapGetter, trace } = await import('@opentelemetry/api')
  const propagator = new W3CTraceContextPropagator()
  const unsampledTrace: RequestTrace = startRequestTrace(tracing, 'continue', request)
  if (unsampledTrace.sampled) throw new Error('sampled at ratio 0')

  const pieces = loops({
    'startRequestTrace, whole (unsampled)': () => {
      sink += startRequestTrace(tracing, 'continue', request).traceId.length
    },
    'propagator.extract + span context, no header': () => {
      const client = propagator.extract(ROOT_CONTEXT, request.headers, defaultTextMapGetter)
      sink += trace.getSpanContext(client) === undefined ? 1 : 0
    },
    'request.routeOptions read (fastify builds it)': () => {
      sink += request.routeOptions.url!.length
    },
    'route prefix regex (routeOf)': () => {
      sink += (request.routeOptions.url!.replace(/\/\*?$/, '') || '/').length
    },
    'ids.generateTraceId': () => {
      sink += ids.generateTraceId().length
    },
    'sampler.shouldSample (parentbased ratio)': () => {
      sink += sampler.shouldSample(
        ROOT_CONTEXT,
        'a1b2c3d4e5f60718293a4b5c6d7e8f90',
        'GET /v1/things',
        1,
        {},
        [],
      ).decision
    },
    'UnsampledTrace.upstream (traceparent)': () => {
      sink += unsampledTrace.upstream('http://127.0.0.1:4000', 'GET').traceparent.length
    },
  })

  // The traceparent in undici's request: its headers checked and joined as it sends them.
  const upstreamHeaders = {
    host: '127.0.0.1:4000',
    'user-agent': 'autocannon/8',
    accept: '*/*',
    'x-request-id': 'b3c0c2d4-0c1e-4b39-9d8e-3f4f2f9e1a00',
    'x-forwarded-for': '127.0.0.1',
    'x-forwarded-proto': 'http',
    'x-forwarded-host': '127.0.0.1:3000',
    'x-tenant-id': '3f1d2c4e-1111-4222-8333-444455556666',
    'x-caller-tenant-id': '3f1d2c4e-1111-4222-8333-444455556666',
  }
  const withParent = { ...upstreamHeaders, traceparent: unsampledTrace.upstream('', '').traceparent }
  const handler = { onConnect() {}, onError() {}, onHeaders() {}, onData() {}, onComplete() {} }
  const undici = loops({
    'undici Request, upstream headers': () => {
      sink += new UndiciRequest(
        'http://127.0.0.1:4000',
        { path: '/v1/things/1', method: 'GET', headers: upstreamHeaders },
        handler,
      ).headers.length
    },
    'undici Request, and a traceparent': () => {
      sink += new UndiciRequest(
        'http://127.0.0.1:4000',
        { path: '/v1/things/1', method: 'GET', headers: withParent },
        handler,
      ).headers.length
    },
  })

  // The request log's `trace_ids`: each record's trace id (unsampled ones too) in the row's binary
  // COPY, a row of 100 records at a time (request-log/row-forms.ts), a record's share.
  const copy = new CopyBuffer(1 << 20)
  const traceIds = Array.from({ length: 100 }, () => ids.generateTraceId())
  const copying = loops(
    {
      "request log COPY: a record's trace id": () => {
        copy.reset()
        copy.texts(traceIds, true)
      },
    },
    CALLS / 100,
  )
  for (const rounds of copying.values()) for (let i = 0; i < rounds.length; i++) rounds[i]! /= 100

  // The request log line at info (the gateway's pino options, a stream that drops what it gets).
  const log = pino(loggerOptions('info'), new Writable({ write: (_chunk, _enc, done) => done() }))
  const logging = loops(
    {
      'logRequest, untraced': () => {
        request.trace = null
        logRequest(log, 'proxy', request, reply)
      },
      'logRequest, unsampled trace (trace_id)': () => {
        request.trace = unsampledTrace
        logRequest(log, 'proxy', request, reply)
      },
    },
    CALLS / 10,
  )
  request.trace = null

  // The plugin's onRequest hook: fastify's own runner (lib/hooks.js, as route.js calls it) over the
  // gateway's other onRequest hooks, without it and with it (one more call in its chain).
  const hook = (req: FastifyRequest, _reply: FastifyReply, done: () => void) => {
    sink += req.trace === null ? 1 : 0
    done()
  }
  const others = Array.from({ length: OTHER_HOOKS }, () => hook)
  const withIt = [...others, hook]
  const ran = () => {
    sink++
  }
  const hooks = loops({
    [`fastify onRequest runner, ${OTHER_HOOKS} hooks`]: () => onRequestHookRunner(others, request, reply, ran),
    [`fastify onRequest runner, ${OTHER_HOOKS + 1} hooks`]: () => onRequestHookRunner(withIt, request, reply, ran),
  })

  return [
    'part 1: an unsampled request (ns a call)',
    ...lines(pieces),
    ...lines(undici),
    ...lines(copying),
    ...lines(logging),
    ...lines(hooks),
  ]
}

/** An exporter's transport that takes every export and answers success at once: no network. */
function offline<E extends SpanExporter>(exporter: E): E {
  ;(exporter as unknown as { _delegate: { _transport: unknown } })._delegate._transport = {
    send: () => Promise.resolve({ status: 'success' }),
    shutdown() {},
  }
  return exporter
}

const TENANT = '3f1d2c4e-1111-4222-8333-444455556666'

/** The server span of bench:proxy's request, its 11 attributes set one by one as request-span.ts sets them. */
function serverSpan(tracer: Tracer): void {
  const span = tracer.startSpan('GET /v1/things', { kind: SpanKind.SERVER }, ROOT_CONTEXT)
  span.setAttribute('http.request.method', 'GET')
  span.setAttribute('url.path', '/v1/things/1')
  span.setAttribute('url.scheme', 'http')
  span.setAttribute('client.address', '127.0.0.1')
  span.setAttribute('http.route', '/v1/things')
  span.setAttribute('user_agent.original', 'autocannon/8')
  span.setAttribute('http.response.status_code', 200)
  span.setAttribute('tenancy.key_id', 'b3c0c2d4-0c1e-4b39-9d8e-3f4f2f9e1a00')
  span.setAttribute('tenancy.caller_tenant_id', TENANT)
  span.setAttribute('tenancy.resolved_tenant_id', TENANT)
  span.setAttribute('tenancy.account_id', TENANT)
  span.end()
}

/** Its upstream attempt's client span: 4 attributes. */
function clientSpan(tracer: Tracer): void {
  const span = tracer.startSpan('GET', { kind: SpanKind.CLIENT }, ROOT_CONTEXT)
  span.setAttribute('http.request.method', 'GET')
  span.setAttribute('server.address', '127.0.0.1')
  span.setAttribute('server.port', 4000)
  span.setAttribute('http.response.status_code', 200)
  span.end()
}

interface FloorSide {
  /** The exporter behind the batch processor; null: no processor at all (the span alone). */
  exporter: (() => SpanExporter) | null
  /** Makes one request's spans (one, or the gateway's two); the report is a span's or a request's. */
  make: 'server' | 'client' | 'gateway'
  batch?: number
}

/** Part 2: µs of CPU a span (or a proxied request's two) through the SDK, the batch processor and the exporter. */
async function floor(): Promise<string[]> {
  const { request, reply } = await aRequest()
  // A key's request: the server span's four tenancy attributes, 11 in all as in bench:proxy.
  const tenant = { id: TENANT, parentId: null }
  Object.assign(request, { principal: { tenant, key: { id: 'b3c0c2d4-0c1e-4b39-9d8e-3f4f2f9e1a00' } } })
  const url = 'http://127.0.0.1:4318/v1/traces'
  const protobuf = () => offline(new ProtobufExporter({ url }))
  const json = () => offline(new JsonExporter({ url }))
  const sides: Record<string, FloorSide> = {
    'server span (11 attributes), SDK alone': { exporter: null, make: 'server' },
    'client span (4 attributes), SDK alone': { exporter: null, make: 'client' },
    'server span, batch 512, protobuf': { exporter: protobuf, make: 'server' },
    'client span, batch 512, protobuf': { exporter: protobuf, make: 'client' },
    'server span, batch 512, json': { exporter: json, make: 'server' },
    'client span, batch 512, json': { exporter: json, make: 'client' },
    'server span, batch 2048, protobuf': { exporter: protobuf, make: 'server', batch: 2048 },
    'a request: RequestSpan server + client, protobuf': { exporter: protobuf, make: 'gateway' },
    'a request: RequestSpan server + client, json': { exporter: json, make: 'gateway' },
  }
  // BENCH_SIDES=<regex>: only the sides it matches (one exporter's alone, say).
  const only = process.env.BENCH_SIDES
  if (only) for (const name of Object.keys(sides)) if (!new RegExp(only).test(name)) delete sides[name]
  const providers = new Map(
    Object.entries(sides).map(([name, side]) => {
      const batch = side.batch ?? 512
      const processor =
        side.exporter === null
          ? []
          : [
              new BatchSpanProcessor({
                exporter: side.exporter(),
                maxExportBatchSize: batch,
                maxQueueSize: Math.max(2048, batch * 4),
              }),
            ]
      return [
        name,
        new TracerProvider({
          resource: resourceFromAttributes({ 'service.name': 'tenancy-gateway' }),
          sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }),
          idGenerator: ids,
          spanProcessors: processor,
        }),
      ]
    }),
  )
  const results = new Map<string, number[]>(Object.keys(sides).map((name) => [name, []]))
  for (let round = 0; round <= ROUNDS; round++)
    for (const [name, side] of Object.entries(sides)) {
      const provider = providers.get(name)!
      const tracer = provider.getTracer('tenancy-gateway')
      const tracing = { tracer, sampler: new AlwaysOnSampler() }
      const started = cpuNs()
      for (let i = 0; i < SPANS; i++) {
        if (side.make === 'server') serverSpan(tracer)
        else if (side.make === 'client') clientSpan(tracer)
        else {
          // A proxied request's two spans, as request-span.ts makes and ends them.
          const trace = startRequestTrace(tracing, 'continue', request) as RequestSpan
          const upstream = trace.upstream('http://127.0.0.1:4000', 'GET')
          upstream.sentTo('127.0.0.1:4000')
          upstream.end(200)
          trace.finish(request, reply)
        }
        // Let the batches' exports (a promise each) run, as requests between spans would.
        if (i % 128 === 127) await new Promise((resolve) => setImmediate(resolve))
      }
      await provider.forceFlush()
      if (round > 0) results.get(name)!.push((cpuNs() - started) / SPANS)
    }
  await Promise.all([...providers.values()].map((provider) => provider.shutdown()))

  // The serializers alone, on a batch of 512 ended server spans: the encoding's share of the above.
  const exporter = new InMemorySpanExporter()
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'tenancy-gateway' }),
    idGenerator: ids,
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
  })
  for (let i = 0; i < 512; i++) serverSpan(provider.getTracer('tenancy-gateway'))
  const batch = exporter.getFinishedSpans()
  const encoding = loops(
    {
      'ProtobufTraceSerializer, a server span': () => {
        sink += ProtobufTraceSerializer.serializeRequest(batch)!.length
      },
      'JsonTraceSerializer, a server span': () => {
        sink += JsonTraceSerializer.serializeRequest(batch)!.length
      },
    },
    Math.max(1, Math.round(SPANS / 512)),
  )
  for (const rounds of encoding.values()) for (let i = 0; i < rounds.length; i++) rounds[i]! /= 512
  const worker = await inWorker(Math.max(1, Math.round(SPANS / 512)))
  return [
    `part 2: the SDK's floor, µs of CPU a span (a request's two on the RequestSpan line; ${SPANS.toLocaleString('en')} a round)`,
    ...lines(results, 'µs'),
    ...lines(encoding, 'µs'),
    ...lines(worker.serializers, 'µs'),
    ...lines(worker.chars, 'ns', 1),
  ]
}

/**
 * The same serializers, and a loop of `charCodeAt` (the protobuf writer's, per character), in a
 * worker thread: a V8 isolate of its own, where no module has made an object whose prototype is
 * String.prototype. ioredis does (its RESP3 `VerbatimString extends String`), in this process as in
 * the gateway's, and from then on every `charCodeAt` in the isolate is several times slower.
 */
async function inWorker(calls: number): Promise<Record<'serializers' | 'chars', Map<string, number[]>>> {
  const code = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { ProtobufTraceSerializer, JsonTraceSerializer } = require('@opentelemetry/otlp-transformer')
    const { resourceFromAttributes } = require('@opentelemetry/resources')
    const {
      InMemorySpanExporter, ParentBasedSampler, SimpleSpanProcessor, TraceIdRatioBasedSampler, TracerProvider,
    } = require('@opentelemetry/sdk-trace')
    const { ROOT_CONTEXT } = require('@opentelemetry/api')
    if (workerData.polluted) globalThis.VerbatimString = class VerbatimString extends String {}
    const exporter = new InMemorySpanExporter()
    const provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': 'tenancy-gateway' }),
      spanProcessors: [new SimpleSpanProcessor({ exporter })],
    })
    const tracer = provider.getTracer('tenancy-gateway')
    const TENANT = '${TENANT}'
    ${serverSpan
      .toString()
      .replace(/SpanKind\.SERVER/, '1')
      .replace(/ROOT_CONTEXT/, 'undefined')
      .replace(/: Tracer/, '')}
    for (let i = 0; i < 512; i++) serverSpan(tracer)
    const batch = exporter.getFinishedSpans()
    const text = 'tenancy.resolved_tenant_id' + TENANT
    const cpu = () => { const u = process.threadCpuUsage(); return (u.user + u.system) * 1000 }
    const sampler = new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(0.01) })
    const out = { protobuf: [], json: [], chars: [], sampler: [] }
    let sink = 0
    for (let round = 0; round <= workerData.rounds; round++) {
      let started = cpu()
      for (let i = 0; i < workerData.calls; i++) sink += ProtobufTraceSerializer.serializeRequest(batch).length
      if (round > 0) out.protobuf.push((cpu() - started) / workerData.calls / 512)
      started = cpu()
      for (let i = 0; i < workerData.calls; i++) sink += JsonTraceSerializer.serializeRequest(batch).length
      if (round > 0) out.json.push((cpu() - started) / workerData.calls / 512)
      started = cpu()
      for (let i = 0; i < 100000; i++) for (let c = 0; c < text.length; c++) sink += text.charCodeAt(c)
      if (round > 0) out.chars.push((cpu() - started) / 100000 / text.length)
      started = cpu()
      for (let i = 0; i < 200000; i++)
        sink += sampler.shouldSample(ROOT_CONTEXT, 'a1b2c3d4e5f60718293a4b5c6d7e8f90', 'GET /v1/things', 1, {}, []).decision
      if (round > 0) out.sampler.push((cpu() - started) / 200000)
    }
    parentPort.postMessage({ out, sink })
  `
  const results = new Map<string, number[]>()
  const chars = new Map<string, number[]>()
  for (const polluted of [false, true]) {
    const { out } = await new Promise<{ out: Record<'protobuf' | 'json' | 'chars' | 'sampler', number[]> }>(
      (resolve, reject) => {
        const worker = new Worker(code, { eval: true, workerData: { calls, rounds: ROUNDS, polluted } })
        worker.once('message', resolve)
        worker.once('error', reject)
      },
    )
    const where = polluted ? 'worker, a String subclass made' : 'worker, no String subclass'
    results.set(`ProtobufTraceSerializer, ${where}`, out.protobuf)
    results.set(`JsonTraceSerializer, ${where}`, out.json)
    chars.set(`charCodeAt, a character, ${where}`, out.chars)
    chars.set(`sampler.shouldSample (parentbased ratio), ${where}`, out.sampler)
  }
  return { serializers: results, chars }
}

run(async () => {
  const part = process.env.BENCH_PART
  const out = [
    ...reportHead('bench:trace-loop'),
    `loop      ${ROUNDS} rounds after one uncounted, the sides in turn; ${CALLS.toLocaleString('en')} calls a side a round (logRequest a tenth)`,
    '',
  ]
  if (part !== '2') out.push(...(await unsampled()), '')
  if (part !== '1') out.push(...(await floor()))
  out.push(`(sink ${sink > 0 ? 'kept' : 'empty'})`)
  console.log(out.join('\n'))
})
