// The trace and span ids the tracer and the unsampled traces use (traces/ids.ts): W3C Trace
// Context's form (lowercase hex, 32 and 16 digits), random, and never all zeros (an invalid id).
import t from 'tap'
import { ids } from '../../src/traces/ids.js'

t.test('lowercase hex of 32 and 16 digits, a new one each call', async (t) => {
  const traceIds = new Set<string>()
  const spanIds = new Set<string>()
  for (let i = 0; i < 1000; i++) {
    const traceId = ids.generateTraceId()
    const spanId = ids.generateSpanId()
    t.match(traceId, /^[0-9a-f]{32}$/)
    t.match(spanId, /^[0-9a-f]{16}$/)
    traceIds.add(traceId)
    spanIds.add(spanId)
  }
  t.equal(traceIds.size, 1000)
  t.equal(spanIds.size, 1000)
})

t.test('every byte value is written, high and low', async (t) => {
  const random = Math.random
  t.teardown(() => {
    Math.random = random
  })
  // 0xfedcba98 of 2^32, then 0x01234567.
  const words = [0xfedcba98, 0x01234567]
  let call = 0
  Math.random = () => words[call++ % 2]! / 4294967296
  t.equal(ids.generateSpanId(), 'fedcba9801234567')
  t.equal(ids.generateTraceId(), 'fedcba9801234567fedcba9801234567')
})

t.test('all zeros, an invalid id, is never made', async (t) => {
  const random = Math.random
  t.teardown(() => {
    Math.random = random
  })
  Math.random = () => 0
  t.equal(ids.generateTraceId(), '00000000000000000000000000000001')
  t.equal(ids.generateSpanId(), '0000000000000001')
})
