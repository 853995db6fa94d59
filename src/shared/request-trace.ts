// What a request's trace offers the code that serves it (docs/operations.md, Traces): the
// gateway's spans are made where it does the work, through this shape, so that every floor can
// make one without knowing the SDK (traces/ holds it, loaded only when tracing is on). With
// tracing off `request.trace` is null: the whole cost is that one check.
import type { FastifyReply, FastifyRequest } from 'fastify'

/** One span of work the request waits for (a Postgres or Redis call, a lease, an upstream attempt). */
export interface WorkSpan {
  /** Ends the span; `errorType` (semantic conventions' `error.type`) when the work failed. */
  end(errorType?: string): void
}

/** A client span for one attempt at the upstream, and the `traceparent` that names it as the parent. */
export interface UpstreamSpan {
  /** W3C Trace Context: the upstream's `traceparent`, this span its parent, sampled or not. */
  readonly traceparent: string
  /**
   * The attempt was handed to `host` (`host:port`, the Host field the gateway sent it with): the
   * target a balanced route's pick chose, named as the span's `server.address` and `server.port`
   * in place of the route's first target's, which it started with.
   */
  sentTo(host: string): void
  /** Ends it with the upstream's status; with `errorType` when there was none (a refusal, a timeout). */
  end(statusCode: number | null, errorType?: string): void
}

/** Where a work span's attributes come from: the semantic conventions' database ones. */
export interface WorkAttributes {
  /** `postgresql`, `redis`; absent for a wait of the gateway's own (a limit lease). */
  readonly system?: 'postgresql' | 'redis'
  /** What was asked (`SELECT`, `EVALSHA`, `lease`): a verb or a name, never a statement's values. */
  readonly operation: string
}

/** A request's trace: its server span, and the spans of what it waits for. */
export interface RequestTrace {
  /** 32 hex digits: the request log record's `trace_id`, the exemplar's. */
  readonly traceId: string
  /** Whether the trace is sampled (recorded and exported): only then is it worth an exemplar. */
  readonly sampled: boolean
  /** A child span of work the request waits for. */
  work(name: string, attributes: WorkAttributes): WorkSpan
  /** A client span for one attempt at `upstream` (an origin: scheme, host and port only). */
  upstream(upstream: string, method: string): UpstreamSpan
  /** Notes a refusal: the problem code, and the limits' policies that refused it. */
  refused(code: string, violatedPolicies?: readonly string[]): void
  /**
   * The request was answered (ops/request-accounting.ts, once): its status and tenancy go on the
   * server span, which ends, unless it is a WebSocket's upgrade (101): that one ends with `closed`.
   */
  finish(request: FastifyRequest, reply: FastifyReply): void
  /** A WebSocket's close: an event on its upgrade's span (code, seconds open, bytes), which then ends. */
  closed(code: number, receivedBytes: number, sentBytes: number): void
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's trace; null when tracing is off (traces/plugin.ts). */
    trace: RequestTrace | null
  }
}
