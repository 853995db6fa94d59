// Trace and span ids as the SDK's own RandomIdGenerator makes them (Math.random, 32 bits at a
// time, never all zeros: W3C Trace Context), written as character codes in one String.fromCharCode
// rather than through a shared Buffer's toString('hex'), a call into C++ per id (issue 84: an
// unsampled request makes three ids; a span id 181 ns against 115, flattened and checked as the
// SDK checks it). Given to the tracer provider (tracer.ts) through the SDK's `idGenerator` option.
import type { IdGenerator } from '@opentelemetry/sdk-trace'

/** The character code of each hex digit, lowercase. */
const DIGIT: readonly number[] = Array.from('0123456789abcdef', (digit) => digit.charCodeAt(0))

/** 32 random bits; `>>> 0` drops the fraction (2^32 itself never comes: Math.random() < 1). */
const random32 = (): number => (Math.random() * 4294967296) >>> 0

/** 16 hex digits of `high` then `low`, in one flat string. */
function hex64(high: number, low: number): string {
  const d = DIGIT
  return String.fromCharCode(
    d[high >>> 28]!,
    d[(high >>> 24) & 15]!,
    d[(high >>> 20) & 15]!,
    d[(high >>> 16) & 15]!,
    d[(high >>> 12) & 15]!,
    d[(high >>> 8) & 15]!,
    d[(high >>> 4) & 15]!,
    d[high & 15]!,
    d[low >>> 28]!,
    d[(low >>> 24) & 15]!,
    d[(low >>> 20) & 15]!,
    d[(low >>> 16) & 15]!,
    d[(low >>> 12) & 15]!,
    d[(low >>> 8) & 15]!,
    d[(low >>> 4) & 15]!,
    d[low & 15]!,
  )
}

export class FastIdGenerator implements IdGenerator {
  /** The trace id the next root span takes (`takeTraceIdOnce`), or null: a new one. */
  private next: string | null = null

  /**
   * The next root span the tracer starts takes `traceId`: the one its sampler already decided on
   * (request-span.ts asks the sampler before it asks for a span). Call just before startSpan.
   */
  takeTraceIdOnce(traceId: string): void {
    this.next = traceId
  }

  /** 32 hex digits; all zeros (invalid) becomes ...01, as the SDK's does. */
  generateTraceId(): string {
    const next = this.next
    if (next !== null) {
      this.next = null
      return next
    }
    const a = random32()
    const b = random32()
    const c = random32()
    const d = random32()
    return hex64(a, b) + hex64(c, (a | b | c | d) === 0 ? 1 : d)
  }

  /** 16 hex digits; all zeros (invalid) becomes ...01. */
  generateSpanId(): string {
    const a = random32()
    const b = random32()
    return hex64(a, (a | b) === 0 ? 1 : b)
  }
}

/** The one generator of the process: its ids are the tracer's and the unsampled traces' alike. */
export const ids = new FastIdGenerator()
