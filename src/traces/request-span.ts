// A request's trace (shared/request-trace.ts) on the OpenTelemetry SDK: the server span, named and
// attributed as the HTTP semantic conventions say, the tenancy beside them, and the child spans of
// what the request waits for. The client's W3C Trace Context is continued, or (TRACE_CLIENT_CONTEXT
// =ignore) linked from a new trace. What is recorded is chosen here and only here: never a key, a
// secret, a token, an Authorization or Cookie header, a query string or a body.
import {
  type Attributes,
  type Context,
  defaultTextMapGetter,
  type Link,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import { SamplingDecision } from '@opentelemetry/sdk-trace'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { RequestTrace, UpstreamSpan, WorkAttributes, WorkSpan } from '../shared/request-trace.js'
import { ids } from './ids.js'
import type { Tracing } from './tracer.js'
import { UnsampledTrace } from './unsampled-trace.js'

const propagator = new W3CTraceContextPropagator()

/** `server.address` and `server.port` of an upstream. */
interface ServerAttributes {
  address: string
  port: number
}

/**
 * Each upstream's, parsed once (not per request), by its origin or, once an attempt is sent, by
 * the Host field it went with (as a URL of the route's scheme): both come from the route table,
 * never from a client, so the map holds an entry or two a target.
 */
const servers = new Map<string, ServerAttributes>()
function serverOf(upstream: string): ServerAttributes {
  let server = servers.get(upstream)
  if (server === undefined) {
    const url = new URL(upstream)
    server = { address: url.hostname, port: Number(url.port || (url.protocol === 'https:' ? 443 : 80)) }
    servers.set(upstream, server)
  }
  return server
}

/**
 * Each proxied route's prefix by its template, made once rather than by a regex a request: the
 * templates come from the route table, never from a client, so the map holds one a route.
 */
const prefixes = new Map<string, string>()

/** `/v1/things/*` or `/v1/things/` → `/v1/things`; the catch-all's `/*` → `/`. */
function routePrefixOf(url: string): string {
  let prefix = prefixes.get(url)
  if (prefix === undefined) {
    prefix = url.replace(/\/\*?$/, '') || '/'
    prefixes.set(url, prefix)
  }
  return prefix
}

/** The span's name and `http.route` (OpenTelemetry's HTTP server spans): the route's template, or its prefix when proxied. */
function routeOf(request: FastifyRequest): string | null {
  if (request.is404) return null
  // Read once: fastify builds the object anew at each read.
  const options = request.routeOptions
  const url = options.url
  if (url === undefined) return null
  return options.config.kind === 'proxy' ? routePrefixOf(url) : url
}

/** The request's path without its query (`url.path`: a query may carry a credential). */
function pathOf(url: string): string {
  const query = url.indexOf('?')
  return query === -1 ? url : url.slice(0, query)
}

/** The upstream's `traceparent` for `span` (W3C Trace Context, version 00), as the propagator writes it. */
function traceparentOf(span: Span): string {
  const { traceId, spanId, traceFlags } = span.spanContext()
  return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`
}

/** The sampler's attributes and links when there are none: read, never written, by the specification's samplers. */
const NONE: Readonly<Attributes> = Object.freeze({})
const NO_LINKS: Link[] = Object.freeze([]) as unknown as Link[]

/**
 * The request's trace. The tracer's own sampler decides first, as the SDK's startSpan would (the
 * same context, trace id, name, kind and links): unsampled (most requests at a low ratio), an
 * `UnsampledTrace`, no SDK span, no attribute; sampled, a `RequestSpan`, whose server span the
 * SDK starts on that trace id (the specification's samplers decide the same twice).
 */
export function startRequestTrace(
  tracing: Pick<Tracing, 'tracer' | 'sampler'>,
  clientContext: 'continue' | 'ignore',
  request: FastifyRequest,
): RequestSpan | UnsampledTrace {
  // Without a traceparent the propagator reads nothing (W3C Trace Context: tracestate alone is
  // ignored) and hands back the context it was given: most requests skip it.
  const client =
    request.headers.traceparent === undefined
      ? ROOT_CONTEXT
      : propagator.extract(ROOT_CONTEXT, request.headers, defaultTextMapGetter)
  const clientSpan = client === ROOT_CONTEXT ? undefined : trace.getSpanContext(client)
  const valid = clientSpan !== undefined && trace.isSpanContextValid(clientSpan)
  const continued = clientContext === 'continue' && valid
  const links: Link[] | undefined = clientContext === 'ignore' && valid ? [{ context: clientSpan! }] : undefined
  const route = routeOf(request)
  const name = route === null ? request.method : `${request.method} ${route}`
  const parent = clientContext === 'continue' ? client : ROOT_CONTEXT
  const traceId = continued ? clientSpan!.traceId : ids.generateTraceId()
  const { decision } = tracing.sampler.shouldSample(parent, traceId, name, SpanKind.SERVER, NONE, links ?? NO_LINKS)
  if (decision === SamplingDecision.NOT_RECORD) return new UnsampledTrace(traceId)
  if (!continued) ids.takeTraceIdOnce(traceId)
  // No attributes at the start: the SDK copies and checks them twice more before the span's own
  // check (its sampler's input), and the specification's samplers read none. Set on the span below.
  const span = tracing.tracer.startSpan(name, { kind: SpanKind.SERVER, links }, parent)
  return new RequestSpan(tracing.tracer, span, route, request)
}

/** A sampled request's trace: its server span recording, and the spans of what it waits for. */
export class RequestSpan implements RequestTrace {
  readonly traceId: string
  readonly spanId: string
  readonly sampled = true
  private readonly tracer: Tracer
  private readonly span: Span
  /** The server span's context: the parent of every span of this request. */
  private readonly context: Context
  private readonly startedAt = performance.now()
  private upgraded = false

  constructor(tracer: Tracer, span: Span, route: string | null, request: FastifyRequest) {
    this.tracer = tracer
    this.span = span
    const spanContext = span.spanContext()
    this.traceId = spanContext.traceId
    this.spanId = spanContext.spanId
    this.context = trace.setSpan(ROOT_CONTEXT, span)
    // One call a value, no object of them: setAttributes would walk one made for it.
    span.setAttribute('http.request.method', request.method)
    span.setAttribute('url.path', pathOf(request.url))
    span.setAttribute('url.scheme', request.protocol)
    span.setAttribute('client.address', request.ip)
    if (route !== null) span.setAttribute('http.route', route)
    const agent = request.headers['user-agent']
    if (agent !== undefined) span.setAttribute('user_agent.original', agent)
  }

  work(name: string, attributes: WorkAttributes): WorkSpan {
    const system = attributes.system
    const span = this.tracer.startSpan(
      name,
      { kind: system === undefined ? SpanKind.INTERNAL : SpanKind.CLIENT },
      this.context,
    )
    if (system === undefined) span.setAttribute('tenancy.wait', attributes.operation)
    else {
      span.setAttribute('db.system.name', system)
      span.setAttribute('db.operation.name', attributes.operation)
    }
    let ended = false
    return {
      end(errorType) {
        if (ended) return
        ended = true
        if (errorType !== undefined) {
          span.setAttribute('error.type', errorType)
          span.setStatus({ code: SpanStatusCode.ERROR })
        }
        span.end()
      },
    }
  }

  upstream(upstream: string, method: string): UpstreamSpan {
    const span = this.tracer.startSpan(method, { kind: SpanKind.CLIENT }, this.context)
    const server = serverOf(upstream)
    span.setAttribute('http.request.method', method)
    span.setAttribute('server.address', server.address)
    span.setAttribute('server.port', server.port)
    return {
      traceparent: traceparentOf(span),
      sentTo(host) {
        // A Host field without a port names the scheme's default: the route's (its first target's).
        const target = serverOf(`${upstream.startsWith('https:') ? 'https' : 'http'}://${host}`)
        if (target.address !== server.address) span.setAttribute('server.address', target.address)
        if (target.port !== server.port) span.setAttribute('server.port', target.port)
      },
      end(statusCode, errorType) {
        if (statusCode !== null) span.setAttribute('http.response.status_code', statusCode)
        // A client span's error is any status from 400 (the semantic conventions' HTTP client spans).
        const error = errorType ?? (statusCode !== null && statusCode >= 400 ? String(statusCode) : undefined)
        if (error !== undefined) {
          span.setAttribute('error.type', error)
          span.setStatus({ code: SpanStatusCode.ERROR })
        }
        span.end()
      },
    }
  }

  refused(code: string, violatedPolicies?: readonly string[]): void {
    this.span.setAttribute('tenancy.refusal', code)
    if (violatedPolicies !== undefined && violatedPolicies.length > 0)
      this.span.setAttribute('tenancy.violated_policies', [...violatedPolicies])
  }

  finish(request: FastifyRequest, reply: FastifyReply): void {
    const span = this.span
    const status = reply.statusCode
    span.setAttribute('http.response.status_code', status)
    const principal = request.principal
    if (principal !== null) {
      const tenant = principal.tenant
      span.setAttribute('tenancy.key_id', principal.key.id)
      span.setAttribute('tenancy.caller_tenant_id', tenant.id)
      span.setAttribute('tenancy.resolved_tenant_id', (request.actingTenant ?? tenant).id)
      span.setAttribute('tenancy.account_id', tenant.parentId ?? tenant.id)
    }
    // A server span's error is a 5xx only: a 4xx is the client's (the semantic conventions).
    if (status >= 500) {
      span.setAttribute('error.type', reply.problemCode ?? String(status))
      span.setStatus({ code: SpanStatusCode.ERROR })
    }
    if (status === 101) {
      this.upgraded = true
      return
    }
    span.end()
  }

  closed(code: number, receivedBytes: number, sentBytes: number): void {
    if (!this.upgraded) return
    this.upgraded = false
    this.span.addEvent('websocket.close', {
      'websocket.close.code': code,
      'websocket.duration': (performance.now() - this.startedAt) / 1000,
      'websocket.received_bytes': receivedBytes,
      'websocket.sent_bytes': sentBytes,
    })
    this.span.end()
  }
}
