// A route's retries without I/O (docs/configuration.md, routes: `retries`): the option as the
// route table reads it, the budget on a clock the test moves, the backoff's bounds, what a failure
// counts as, a retry's wait for its answer kept inside the route's timeout_ms, and per_try_timeout_ms.
import { performance } from 'node:perf_hooks'
import type { FastifyRequest } from 'fastify'
import t from 'tap'
import type { Dispatcher } from 'undici'
import type { Exchange } from '../../src/proxy/exchange.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import type { UpstreamCall } from '../../src/proxy/upstream-call.js'
import { PerTryTimeoutError } from '../../src/proxy/upstreams/per-try-timeout.js'
import { MIN_RETRIES, RetryBudget } from '../../src/proxy/upstreams/retry-budget.js'
import { RetryingCall } from '../../src/proxy/upstreams/retry-call.js'
import { DEFAULT_RETRIES, heldBodyBytes, type RetryOptions } from '../../src/proxy/upstreams/retry-options.js'
import { backoffMs, failureReason } from '../../src/proxy/upstreams/retry-rules.js'
import { until } from '../helpers/poll.js'
import { refuses, second, WHERE } from '../helpers/route-table.js'

const coded = (code: string) => Object.assign(new Error(code), { code })

t.test('retries, with their defaults', async (t) => {
  const [first, route] = loadRouteTable(
    second({ retries: { attempts: 3, on: ['reset', 503, '504'], budget_percent: 50, buffer_bytes: 0 } }),
    'http://catch.all:1',
  )
  t.equal(first!.retries, DEFAULT_RETRIES, 'a route without retries: one, on connect_failure')
  t.same(DEFAULT_RETRIES, {
    attempts: 1,
    on: new Set(['connect_failure']),
    budgetPercent: 20,
    bufferBytes: 65_536,
    perTryTimeoutMs: null,
  })
  t.same(route!.retries, {
    attempts: 3,
    on: new Set(['reset', '503', '504']),
    budgetPercent: 50,
    bufferBytes: 0,
    perTryTimeoutMs: null,
  })
  const [, partial] = loadRouteTable(second({ retries: { attempts: 0 } }), undefined)
  t.same(partial!.retries, { ...DEFAULT_RETRIES, attempts: 0 }, 'the rest defaulted')
})

t.test('a body is held only for a retry that needs it', async (t) => {
  t.equal(heldBodyBytes(DEFAULT_RETRIES), 0, 'a connect failure sends the body again unread')
  t.equal(heldBodyBytes({ ...DEFAULT_RETRIES, on: new Set(['connect_failure', '503']) }), 65_536)
  t.equal(heldBodyBytes({ ...DEFAULT_RETRIES, attempts: 0, on: new Set(['reset']) }), 0, 'no retries, nothing held')
})

t.test('each mistake in retries refused with its field', async (t) => {
  const cases: [string, unknown, RegExp][] = [
    ['a list', [1], /retries must be a mapping/],
    ['attempts 6', { attempts: 6 }, /retries\.attempts must be a whole number from 0 to 5/],
    ['attempts -1', { attempts: -1 }, /retries\.attempts/],
    ['attempts "1"', { attempts: '1' }, /retries\.attempts/],
    ['on a string', { on: 'reset' }, /retries\.on must be a list of connect_failure, reset, 502, 503, 504/],
    ['on 500', { on: [500] }, /retries\.on .*\(not 500\)/],
    ['on timeout', { on: ['timeout'] }, /retries\.on .*\(not "timeout"\)/],
    ['budget 101', { budget_percent: 101 }, /retries\.budget_percent must be a whole number from 0 to 100/],
    ['buffer 1.5', { buffer_bytes: 1.5 }, /retries\.buffer_bytes must be a whole number from 0 to 16777216/],
    ['unknown key', { retry_on: [] }, /retries: unknown key "retry_on"/],
  ]
  for (const [name, retries, mentions] of cases) refuses(t, second({ retries }), WHERE, name, undefined, mentions)
})

t.test('per_try_timeout_ms: below the route timeout_ms, off by default', async (t) => {
  const [, route] = loadRouteTable(second({ timeout_ms: 2000, retries: { per_try_timeout_ms: 500 } }), undefined)
  t.equal(route!.retries.perTryTimeoutMs, 500)
  const [, fallback] = loadRouteTable(second({ retries: { per_try_timeout_ms: 29_999 } }), undefined)
  t.equal(fallback!.retries.perTryTimeoutMs, 29_999, 'below the default timeout_ms (30000) when the route sets none')
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['equal to timeout_ms', { timeout_ms: 2000, retries: { per_try_timeout_ms: 2000 } }, /from 1 to 1999/],
    [
      'above timeout_ms',
      { timeout_ms: 2000, retries: { per_try_timeout_ms: 5000 } },
      /below the route's timeout_ms \(2000\)/,
    ],
    ['above the default timeout_ms', { retries: { per_try_timeout_ms: 30_000 } }, /timeout_ms \(30000\)/],
    ['zero', { retries: { per_try_timeout_ms: 0 } }, /retries\.per_try_timeout_ms must be a whole number of ms/],
    ['a fraction', { retries: { per_try_timeout_ms: 1.5 } }, /retries\.per_try_timeout_ms/],
    ['a string', { retries: { per_try_timeout_ms: '500' } }, /leave it out to let each attempt wait/],
    ['without retries', { retries: { attempts: 0, per_try_timeout_ms: 500 } }, /needs attempts of 1 or more/],
  ]
  for (const [name, entry, mentions] of cases) refuses(t, second(entry), WHERE, name, undefined, mentions)
})

t.test('the budget: a share of the last 10 s of requests, at least 3', async (t) => {
  const clock = { now: 1_000_000 }
  const budget = new RetryBudget(20, () => clock.now)
  for (let i = 0; i < MIN_RETRIES; i++) t.ok(budget.tryRetry(), 'a quiet route still retries')
  t.notOk(budget.tryRetry(), 'but no more than 3')
  for (let i = 0; i < 50; i++) budget.request()
  t.ok(budget.tryRetry(), '20 % of 50 is 10')
  for (let i = 0; i < 6; i++) budget.tryRetry()
  t.notOk(budget.tryRetry(), 'ten in all')
  clock.now += 5_000
  t.notOk(budget.tryRetry(), 'still within the window')
  clock.now += 5_000
  t.ok(budget.tryRetry(), 'after 10 s the window has moved on')
  clock.now += 60_000
  for (let i = 0; i < MIN_RETRIES; i++) t.ok(budget.tryRetry())
  t.notOk(budget.tryRetry(), 'long after, the floor again')
  clock.now -= 30_000
  t.notOk(budget.tryRetry(), 'a clock set back counts in the newest bucket')
  const none = new RetryBudget(0, () => clock.now)
  for (let i = 0; i < 1000; i++) none.request()
  for (let i = 0; i < MIN_RETRIES; i++) t.ok(none.tryRetry(), 'budget_percent 0 still allows the floor')
  t.notOk(none.tryRetry())
})

t.test('the backoff: 25 ms doubled, jittered to half of it and more', async (t) => {
  t.same(
    [0, 1, 2, 4].map((n) => [backoffMs(n, () => 0), backoffMs(n, () => 0.999999)].map(Math.round)),
    [
      [13, 25],
      [25, 50],
      [50, 100],
      [200, 400],
    ],
  )
})

t.test('what a failure counts as', async (t) => {
  t.equal(failureReason(coded('ECONNREFUSED'), false), 'connect_failure')
  t.equal(failureReason(coded('UND_ERR_CONNECT_TIMEOUT'), false), 'connect_failure')
  t.equal(failureReason(coded('UND_ERR_SOCKET'), true), 'reset')
  t.equal(failureReason(coded('ECONNRESET'), true), 'reset')
  t.equal(failureReason(coded('UND_ERR_HEADERS_TIMEOUT'), true), null, 'a timeout spent the time: never retried')
  t.equal(
    failureReason(coded('UND_ERR_HEADERS_TIMEOUT'), true, true),
    'per_try_timeout',
    'an attempt past per_try_timeout_ms: retried as its 504',
  )
  t.equal(failureReason(new Error('the client left'), false), null, "the gateway's own abort")
  t.equal(failureReason(new Error('the client left'), true), null)
})

t.test('a retry waits for its answer no longer than what is left of timeout_ms', async (t) => {
  const sent: Dispatcher.DispatchOptions[] = []
  const handlers: Dispatcher.DispatchHandler[] = []
  const request = {
    method: 'GET',
    headers: {},
    heldBody: null,
    upstreamSentAt: performance.now(),
  } as unknown as FastifyRequest
  const exchange = { clientGone: () => false, upstreamSettled() {} } as unknown as Exchange
  const passed: number[] = []
  const inner = {
    onRequestStart() {},
    onResponseStart(_c: unknown, status: number) {
      passed.push(status)
    },
    onResponseError() {},
    clientLeft() {},
    startSpan() {},
    dispatched() {},
    attemptRetried() {},
  } as unknown as UpstreamCall
  const call = new RetryingCall(
    inner,
    request,
    exchange,
    {
      options: { ...DEFAULT_RETRIES, attempts: 5, on: new Set(['503']) },
      timeoutMs: 300,
      budget: new RetryBudget(100),
      counters: { retried() {}, exhausted() {} },
      send(options, handler) {
        sent.push(options)
        handlers.push(handler)
        return null
      },
    },
    { path: '/', method: 'GET', headers: {} },
  )
  call.start()
  const controller = { abort() {} } as unknown as Dispatcher.DispatchController
  for (let answered = 0; ; answered++) {
    const handler = handlers[answered]!
    handler.onRequestStart?.(controller, {})
    handler.onResponseStart?.(controller, 503, {}, 'Service Unavailable')
    if (passed.length > 0) break
    t.ok(await until(5_000, async () => handlers.length > answered + 1), 'retried')
    const timeout = sent[answered + 1]!.headersTimeout!
    t.ok(timeout <= 300 - 12, `the retry's headers timeout, ${timeout} ms, is what is left of 300`)
    t.ok(timeout >= 1)
  }
  t.same(passed, [503], 'the last 503 goes to the client')
  t.ok(sent.length <= 5, `no retry would end past 300 ms (${sent.length - 1} made)`)
})

/** A RetryingCall for a `method` request on a route with `retries`, and what it sent and passed on. */
function perTryCall(method: string, retries: Partial<RetryOptions>, timeoutMs = 10_000) {
  const sent: Dispatcher.DispatchOptions[] = []
  const handlers: Dispatcher.DispatchHandler[] = []
  const retried: string[] = []
  const errors: Error[] = []
  const request = {
    method,
    headers: {},
    heldBody: null,
    upstreamSentAt: performance.now(),
  } as unknown as FastifyRequest
  const exchange = { clientGone: () => false, upstreamSettled() {} } as unknown as Exchange
  const inner = {
    onRequestStart() {},
    onResponseError(_c: unknown, error: Error) {
      errors.push(error)
    },
    clientLeft() {},
    startSpan() {},
    dispatched() {},
    attemptRetried() {},
  } as unknown as UpstreamCall
  const call = new RetryingCall(
    inner,
    request,
    exchange,
    {
      options: { ...DEFAULT_RETRIES, ...retries },
      timeoutMs,
      budget: new RetryBudget(100),
      counters: { retried: (reason) => retried.push(reason), exhausted() {} },
      send(options, handler) {
        sent.push(options)
        handlers.push(handler)
        return null
      },
    },
    { path: '/', method: method as Dispatcher.HttpMethod, headers: {} },
  )
  call.start()
  /** Attempt `n` went out and waited out its headers timeout. */
  const timesOut = (n: number) => {
    const controller = { abort() {} } as unknown as Dispatcher.DispatchController
    handlers[n]!.onRequestStart?.(controller, {})
    handlers[n]!.onResponseError?.(controller, coded('UND_ERR_HEADERS_TIMEOUT'))
  }
  return { sent, handlers, retried, errors, timesOut, sentAt: request.upstreamSentAt }
}

t.test('an attempt past per_try_timeout_ms is retried as its 504', async (t) => {
  const get = perTryCall('GET', { attempts: 2, on: new Set(['504']), perTryTimeoutMs: 100 })
  t.equal(get.sent[0]!.headersTimeout, 100, 'the first attempt waits per_try_timeout_ms for its head')
  get.timesOut(0)
  t.ok(await until(5_000, async () => get.handlers.length === 2), 'retried')
  t.equal(get.sent[1]!.headersTimeout, 100, 'and so does the retry')
  t.same(get.retried, ['per_try_timeout'], 'counted as per_try_timeout')
  get.timesOut(1)
  t.ok(await until(5_000, async () => get.handlers.length === 3))
  get.timesOut(2)
  t.equal(get.errors.length, 1, 'retries spent: the last timeout goes to the client')
  t.type(get.errors[0], PerTryTimeoutError)
  t.equal((get.errors[0] as PerTryTimeoutError).timeoutMs, 100, "the client's 504 names per_try_timeout_ms")

  const post = perTryCall('POST', { attempts: 2, on: new Set(['504']), perTryTimeoutMs: 100 })
  post.timesOut(0)
  t.equal(post.handlers.length, 1, 'a POST without Idempotency-Key is not sent twice')
  t.type(post.errors[0], PerTryTimeoutError, 'it gets the 504')

  const unlisted = perTryCall('GET', { attempts: 2, on: new Set(['503']), perTryTimeoutMs: 100 })
  unlisted.timesOut(0)
  t.equal(unlisted.handlers.length, 1, 'not retried when `on` lacks 504')
  t.same(unlisted.retried, [])

  const off = perTryCall('GET', { attempts: 2, on: new Set(['504']) })
  t.equal(off.sent[0]!.headersTimeout, undefined, "without it, the pool's timeout_ms")
  off.timesOut(0)
  t.equal(off.handlers.length, 1, "a timeout of the route's is never retried")
  t.notOk(off.errors[0] instanceof PerTryTimeoutError, "undici's own error goes on")
})

t.test('a retry waits per_try_timeout_ms only while it is shorter than what is left of timeout_ms', async (t) => {
  // 100 ms apart, not 1: a loaded machine stalls a test for a few ms between two of its lines.
  const call = perTryCall('GET', { attempts: 1, on: new Set(['504']), perTryTimeoutMs: 300 }, 400)
  t.equal(call.sent[0]!.headersTimeout, 300, 'the first attempt, with 400 ms left, waits per_try_timeout_ms')
  t.ok(await until(5_000, async () => performance.now() - call.sentAt > 150), 'under 250 ms left')
  call.timesOut(0)
  t.ok(await until(5_000, async () => call.handlers.length === 2), 'retried')
  const timeout = call.sent[1]!.headersTimeout!
  t.ok(timeout < 300, `the retry waits what is left of 400 ms (${timeout})`)
  call.timesOut(1)
  t.notOk(call.errors[0] instanceof PerTryTimeoutError, 'and its timeout is the route timeout')
})
