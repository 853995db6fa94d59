// An unsampled request's trace: what most requests get at a low ratio (0.01: 99 in 100), so it does
// next to nothing. The sampler decided at the server span (request-span.ts); the spans under an
// unsampled parent are unsampled too (parent-based, or the same trace id's ratio), so none is made:
// no SDK span, no attribute, no context. Only the upstream's `traceparent` is written, naming a
// fresh span id for the gateway's call as W3C Trace Context asks, with the flags unsampled (00).
import type { RequestTrace, UpstreamSpan, WorkSpan } from '../shared/request-trace.js'
import { ids } from './ids.js'

const noWork: WorkSpan = { end() {} }
const noEnd = (): void => {}

export class UnsampledTrace implements RequestTrace {
  readonly sampled = false
  /** The sampler's trace (the client's when continued), 32 hex digits. */
  readonly traceId: string

  constructor(traceId: string) {
    this.traceId = traceId
  }

  work(): WorkSpan {
    return noWork
  }

  upstream(): UpstreamSpan {
    return { traceparent: `00-${this.traceId}-${ids.generateSpanId()}-00`, sentTo: noEnd, end: noEnd }
  }

  refused(): void {}

  finish(): void {}

  closed(): void {}
}
