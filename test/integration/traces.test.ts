// Traces over OTLP (docs/operations.md, Traces) against a collector of the test's own on loopback,
// a real upstream and a real WebSocket upstream: the spans of a proxied request, a refusal, a
// management call and a WebSocket (names, attributes, parent and child, links), the upstream's
// traceparent, trace ids in the logs, the request log and the exemplars, both OTLP encodings, and
// never a key, secret, token, cookie, query string or body in any byte exported.
import { randomBytes } from 'node:crypto'
import pino from 'pino'
import t from 'tap'
import { loggerOptions } from '../../src/ops/logging.js'
import { serveMetrics } from '../../src/ops/metrics-server.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { type Collector, type ReceivedSpan, startCollector } from '../helpers/otlp-collector.js'
import { REFUSED_PORT, REFUSED_URL, startUpstream } from '../helpers/upstream.js'
import { openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

const SERVER = 2
const CLIENT = 3

const upstream = await startUpstream(t)
const sockets = await startWebSocketUpstream(t)
const collector = await startCollector(t)
const logged: string[] = []
/** A gateway tracing to `to`, its spans sent 20 ms after they end. */
const tracingGateway = (to: Collector, env: Record<string, string> = {}, logger = false) =>
  startGateway(t, {
    ...(logger ? { logger: pino(loggerOptions('info'), { write: (line: string) => logged.push(line) }) } : {}),
    requestLog: { flushIntervalMs: 50 },
    gatewayConfig: {
      routes: [
        { prefix: '/api', upstream: upstream.url },
        { prefix: '/live', upstream: sockets.url, websocket: true },
        // Round robin: a request sent to the refusing target first is retried on the other.
        { prefix: '/retried', targets: [{ url: REFUSED_URL }, { url: upstream.url }], balance: 'round_robin' },
        { prefix: '/down', upstream: REFUSED_URL },
      ],
    },
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: to.url, OTEL_BSP_SCHEDULE_DELAY: '20', ...env },
  })
const gw = await tracingGateway(collector, {}, true)
const parent = await gw.createParent()

const CLIENT_TRACE = '0af7651916cd43dd8448eb211c80319c'
const CLIENT_SPAN = 'b7ad6b7169203331'
const traceparent = (flags = '01') => `00-${CLIENT_TRACE}-${CLIENT_SPAN}-${flags}`

/** The spans `collector` received of trace `traceId`, once `count` of them and its server span came (polled). */
async function spansOfTrace(from: Collector, traceId: string, count: number): Promise<ReceivedSpan[]> {
  const ofTrace = () => from.spans.filter((span) => span.traceId === traceId)
  // The server span ends last: once it is here, so is every span of its request.
  await until(10_000, async () => ofTrace().length >= count && ofTrace().some((span) => span.kind === SERVER))
  return ofTrace()
}

/** The server span whose name is `name`, once received (polled). */
async function serverSpan(from: Collector, name: string, where: (span: ReceivedSpan) => boolean = () => true) {
  const find = () => from.spans.find((span) => span.kind === SERVER && span.name === name && where(span))
  await until(10_000, async () => find() !== undefined)
  const span = find()
  if (span === undefined)
    throw new Error(`no server span ${name}; received ${from.spans.map((s) => s.name).join(', ')}`)
  return span
}

t.test('a proxied request: its server span continues the client, its client span is the upstream parent', async (t) => {
  const res = await callAs(gw.url, parent.apiKey, {
    path: '/api/things/1?secret-query=hush',
    headers: [
      ['traceparent', traceparent()],
      ['tracestate', 'vendor=opaque'],
      ['User-Agent', 'traces-test/1'],
      ['Cookie', 'session=cookie-value-never-exported'],
    ],
  })
  t.equal(res.status, 200)
  const received = upstream.received.at(-1)!
  const [version, traceId, parentId, flags] = String(received.headers.traceparent).split('-')
  t.equal(version, '00')
  t.equal(traceId, CLIENT_TRACE, 'the upstream is in the client trace')
  t.not(parentId, CLIENT_SPAN, "the upstream's parent is the gateway's, not the client's span")
  t.equal(flags, '01')
  t.equal(received.headers.tracestate, 'vendor=opaque', "the client's tracestate passes")

  // Its key's first request: looked up in Redis, then in Postgres, before the upstream.
  const spans = await spansOfTrace(collector, CLIENT_TRACE, 4)
  const server = spans.find((span) => span.kind === SERVER)!
  const client = spans.find((span) => span.kind === CLIENT && 'http.request.method' in span.attributes)!
  const redis = spans.find((span) => span.attributes['db.system.name'] === 'redis')
  const postgres = spans.find((span) => span.attributes['db.system.name'] === 'postgresql')
  // Redis is asked first, unless a command of a loaded machine's took past its 50 ms and the
  // cache skips it for a moment (a Redis error, counted).
  const redisErrors = await gw.app.metrics.registry.getSingleMetric('tgw_redis_errors_total')!.get()
  if (redisErrors.values.every((value) => value.value === 0))
    t.match(redis, {
      kind: CLIENT,
      name: 'MGET',
      parentSpanId: server.spanId,
      attributes: { 'db.operation.name': 'MGET' },
    })
  t.match(postgres, {
    kind: CLIENT,
    name: 'SELECT',
    parentSpanId: server.spanId,
    attributes: { 'db.operation.name': 'SELECT' },
  })
  t.equal(server.name, 'GET /api')
  t.equal(server.parentSpanId, CLIENT_SPAN, "the server span's parent is the client's span")
  t.equal(client.parentSpanId, server.spanId, 'the client span is a child of the server span')
  t.equal(client.spanId, parentId, "the upstream's traceparent names the client span")
  t.match(server.attributes, {
    'http.request.method': 'GET',
    'http.route': '/api',
    'url.path': '/api/things/1',
    'http.response.status_code': 200,
    'client.address': '127.0.0.1',
    'user_agent.original': 'traces-test/1',
    'tenancy.key_id': parent.keyId,
    'tenancy.caller_tenant_id': parent.id,
    'tenancy.resolved_tenant_id': parent.id,
    'tenancy.account_id': parent.id,
  })
  t.match(client.attributes, {
    'http.request.method': 'GET',
    'http.response.status_code': 200,
    'server.address': '127.0.0.1',
  })
  t.equal(server.resource['service.name'], 'tenancy-gateway')

  // The request log's record carries the trace id, and so do the request's log lines.
  let record: { trace_id?: string } | undefined
  await until(10_000, async () => {
    const page = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/requests', acting: 'self' })
    if (page.status !== 200) throw new Error(`requests: ${page.status} ${page.body}`)
    record = (page.json().data as { id: string; trace_id?: string }[]).find((r) => r.id === res.headers['x-request-id'])
    return record !== undefined
  })
  t.equal(record?.trace_id, CLIENT_TRACE, "the request log's record names its trace")
  const line = logged
    .map((l) => JSON.parse(l))
    .find((l) => l.msg === 'request' && l.reqId === res.headers['x-request-id'])
  t.equal(line?.trace_id, CLIENT_TRACE, 'the request line names its trace')
})

t.test(
  'a retried request: a client span per attempt, each naming its target, the upstream named by the last',
  async (t) => {
    for (let i = 0; i < 10; i++) {
      const trace = randomBytes(16).toString('hex')
      const res = await callAs(gw.url, parent.apiKey, {
        path: '/retried/x',
        headers: [['traceparent', `00-${trace}-${CLIENT_SPAN}-01`]],
      })
      t.equal(res.status, 200)
      const spans = await spansOfTrace(collector, trace, 2)
      const server = spans.find((span) => span.kind === SERVER)!
      const clients = spans.filter((span) => span.kind === CLIENT && 'http.request.method' in span.attributes)
      if (clients.length === 1) continue // the good target first: nothing retried
      t.equal(clients.length, 2, 'two attempts, two client spans')
      const failed = clients.find((span) => span.attributes['error.type'] === 'connect_failure')
      const kept = clients.find((span) => span !== failed)!
      t.ok(failed, "the failed attempt's span says why it failed")
      t.equal(kept.attributes['http.response.status_code'], 200, 'the kept attempt has the answer')
      // Each span names the target its attempt went to, not the route's first.
      t.equal(failed!.attributes['server.port'], REFUSED_PORT, 'the failed attempt names the refusing target')
      t.equal(kept.attributes['server.port'], Number(new URL(upstream.url).port), 'the kept one names the upstream')
      for (const span of clients) t.equal(span.parentSpanId, server.spanId, 'each a child of the server span')
      const received = upstream.received.at(-1)!
      t.equal(
        String(received.headers.traceparent).split('-')[2],
        kept.spanId,
        "the upstream's parent is the kept attempt",
      )
      return
    }
    t.fail('no request went to the refusing target first in 10')
  },
)

t.test('an unsampled client: the upstream still gets a traceparent naming the gateway’s call, unsampled', async (t) => {
  const res = await callAs(gw.url, parent.apiKey, {
    path: '/api/unsampled',
    headers: [['traceparent', traceparent('00')]],
  })
  t.equal(res.status, 200)
  const [, traceId, parentId, flags] = String(upstream.received.at(-1)!.headers.traceparent).split('-')
  t.equal(traceId, CLIENT_TRACE)
  t.not(parentId, CLIENT_SPAN)
  t.equal(flags, '00', 'not sampled, as the client said (parentbased_always_on)')
})

t.test(
  'log lines: a sampled request’s name its trace and server span, an unsampled one’s only its request line',
  async (t) => {
    const linesOf = (reqId: string) =>
      logged.map((l) => JSON.parse(l)).filter((l) => l.reqId === reqId) as Record<string, unknown>[]
    const sampledTrace = randomBytes(16).toString('hex')
    const sampled = await callAs(gw.url, parent.apiKey, {
      path: '/down/x',
      headers: [['traceparent', `00-${sampledTrace}-${CLIENT_SPAN}-01`]],
    })
    t.equal(sampled.status, 502)
    const unsampledTrace = randomBytes(16).toString('hex')
    const unsampled = await callAs(gw.url, parent.apiKey, {
      path: '/down/x',
      headers: [['traceparent', `00-${unsampledTrace}-${CLIENT_SPAN}-00`]],
    })
    t.equal(unsampled.status, 502)
    for (const res of [sampled, unsampled]) {
      const id = String(res.headers['x-request-id'])
      await until(10_000, async () => linesOf(id).some((l) => l.msg === 'request'))
    }
    const server = await serverSpan(collector, 'GET /down', (span) => span.traceId === sampledTrace)
    const sampledLines = linesOf(String(sampled.headers['x-request-id'])).filter((l) => l.msg !== 'request')
    t.ok(sampledLines.length > 0, 'the failed upstream call is logged')
    for (const line of sampledLines) {
      t.equal(line.trace_id, sampledTrace, `"${line.msg}" names the trace`)
      t.equal(line.span_id, server.spanId, `"${line.msg}" names the server span`)
    }
    const unsampledLines = linesOf(String(unsampled.headers['x-request-id']))
    t.ok(unsampledLines.length > 1, 'the failed upstream call is logged')
    for (const line of unsampledLines) {
      if (line.msg === 'request') t.equal(line.trace_id, unsampledTrace, 'the request line names the trace')
      else t.notOk('trace_id' in line || 'span_id' in line, `"${line.msg}" names no trace: none was recorded`)
    }
    t.notOk(
      collector.spans.some((span) => span.traceId === unsampledTrace),
      'nothing of the unsampled request was exported',
    )
  },
)

t.test('a refusal: its span says the problem code, and no upstream span', async (t) => {
  const trace = '1af7651916cd43dd8448eb211c80319c'
  const res = await callAs(gw.url, 'tgw_not_a_real_key_0000000000000000', {
    path: '/api/refused',
    headers: [['traceparent', `00-${trace}-${CLIENT_SPAN}-01`]],
  })
  t.equal(res.status, 401)
  const [span] = await spansOfTrace(collector, trace, 1)
  t.equal(span!.name, 'GET /api')
  t.match(span!.attributes, { 'http.response.status_code': 401, 'tenancy.refusal': 'unauthenticated' })
  t.notOk('error.type' in span!.attributes, 'a 4xx is not a server error')
  t.notOk('tenancy.key_id' in span!.attributes, 'no key was known')
  t.equal(collector.spans.filter((s) => s.traceId === trace).length, 1, 'nothing was sent upstream')
})

t.test("a limit's refusal: its policies on the span; the lease it waited for a child span", async (t) => {
  const sub = (
    await callAs(gw.url, parent.apiKey, {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      json: { name: 'limited', limits: { rate: { requests: 1, per_seconds: 3600 } } },
    })
  ).json() as { id: string }
  const traces = ['2af7651916cd43dd8448eb211c80319c', '3af7651916cd43dd8448eb211c80319c']
  const statuses: number[] = []
  for (const trace of traces)
    statuses.push(
      (
        await callAs(gw.url, parent.apiKey, {
          path: '/api/limited',
          acting: sub.id,
          headers: [['traceparent', `00-${trace}-${CLIENT_SPAN}-01`]],
        })
      ).status,
    )
  t.same(statuses, [200, 429])
  const first = await spansOfTrace(collector, traces[0]!, 3)
  const server = first.find((span) => span.kind === SERVER)!
  const lease = first.find((span) => span.name === 'limit lease')
  t.ok(lease, 'the first request waited for its lease: a span of it')
  t.equal(lease?.parentSpanId, server.spanId, "a child of the request's span")
  t.equal(server.attributes['tenancy.resolved_tenant_id'], sub.id, 'acting as the sub-account')
  const [refused] = await spansOfTrace(collector, traces[1]!, 1)
  t.match(refused!.attributes, {
    'http.response.status_code': 429,
    'tenancy.refusal': 'rate_limited',
    'tenancy.violated_policies': ['sub_account.rate'],
  })
})

t.test('a management call: its span is named by its route template', async (t) => {
  const res = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'body-value-never-exported' },
  })
  t.equal(res.status, 201)
  const sub = res.json() as { id: string }
  const got = await callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts/${sub.id}`, acting: 'self' })
  t.equal(got.status, 200)
  const span = await serverSpan(
    collector,
    'GET /v1/sub-accounts/:sub_id',
    (s) => s.attributes['url.path'] === `/v1/sub-accounts/${sub.id}`,
  )
  t.match(span.attributes, {
    'http.route': '/v1/sub-accounts/:sub_id',
    'tenancy.account_id': parent.id,
    'http.response.status_code': 200,
  })
  // What the call waited for in Postgres: a client span a statement, under the call's server span,
  // named by its operation, never by its text.
  const created = await serverSpan(
    collector,
    'POST /v1/sub-accounts',
    (s) => s.attributes['http.response.status_code'] === 201,
  )
  const statements = (await spansOfTrace(collector, created.traceId, 2)).filter(
    (s) => s.attributes['db.system.name'] === 'postgresql' && s.parentSpanId === created.spanId,
  )
  t.ok(statements.length > 0, "the call's statements are spans of it")
  for (const statement of statements) {
    t.equal(statement.kind, CLIENT)
    t.match(statement.name, /^[A-Z]+$/, `${statement.name}: an operation's name`)
    t.equal(statement.attributes['db.operation.name'], statement.name)
    t.equal(statement.statusCode, 0, 'answered')
  }
  t.ok(
    statements.some((s) => s.name === 'INSERT'),
    `the sub-account's INSERT among them: ${statements.map((s) => s.name).join(', ')}`,
  )
})

t.test("a parent's first management call waits for its rate's lease: a span of it", async (t) => {
  const fresh = await gw.createParent()
  const res = await callAs(gw.url, fresh.apiKey, {
    path: '/v1/sub-accounts',
    acting: 'self',
    headers: [['traceparent', `00-${'f'.repeat(32)}-${CLIENT_SPAN}-01`]],
  })
  t.equal(res.status, 200)
  const [server] = (await spansOfTrace(collector, 'f'.repeat(32), 1)).filter((s) => s.kind === SERVER)
  const leases = collector.spans.filter((s) => s.name === 'limit lease' && s.parentSpanId === server!.spanId)
  t.equal(leases.length, 1, 'one lease wait, under the call')
  t.equal(leases[0]?.attributes['tenancy.wait'], 'lease')
})

t.test('a WebSocket: its upgrade is a span, its close an event on it', async (t) => {
  const socket = await openSocket(t, `${gw.url}/live/feed?token=never-exported`, { key: parent.apiKey })
  socket.ws.send('hello')
  await socket.next()
  socket.ws.close(4001, 'done')
  await socket.closed
  const span = await serverSpan(collector, 'GET /live', (s) => s.attributes['url.path'] === '/live/feed')
  t.equal(span.attributes['http.response.status_code'], 101)
  const close = span.events.find((event) => event.name === 'websocket.close')
  t.ok(close, 'the close is an event on the upgrade span')
  t.equal(close?.attributes['websocket.close.code'], 4001)
  t.ok(Number(close?.attributes['websocket.received_bytes']) > 0)
  t.ok(Number(close?.attributes['websocket.sent_bytes']) > 0)
  t.type(close?.attributes['websocket.duration'], 'number')
})

t.test('the request duration carries sampled traces as OpenMetrics exemplars', async (t) => {
  const server = await serveMetrics(gw.app.metrics.registry, 0, '127.0.0.1', undefined, true)
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  const port = (server.address() as { port: number }).port
  const res = await callAs(gw.url, parent.apiKey, { path: '/api/exemplar', headers: [['traceparent', traceparent()]] })
  t.equal(res.status, 200)
  const open = await fetch(`http://127.0.0.1:${port}/metrics`, {
    headers: { accept: 'application/openmetrics-text; version=1.0.0' },
  })
  t.match(open.headers.get('content-type'), /application\/openmetrics-text/)
  const text = await open.text()
  t.match(text, /tgw_http_request_duration_seconds_bucket\{[^}]*kind="proxy"[^}]*\} \d+ # \{trace_id="[0-9a-f]{32}"\}/)
  t.match(text, /\n# EOF\n$/)
  t.match(text, /\ntgw_http_requests_total\{/, 'counters keep their names')
  const plain = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()
  t.notMatch(plain, /# \{trace_id=/, 'the Prometheus text has no exemplars')
  t.match(plain, /\ntgw_http_requests_total\{/, 'and its counters their _total')
})

t.test('TRACE_CLIENT_CONTEXT=ignore and http/json: a new trace, linked to the client', async (t) => {
  const json = await startCollector(t)
  const ignoring = await tracingGateway(json, {
    TRACE_CLIENT_CONTEXT: 'ignore',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  })
  const own = await ignoring.createParent()
  const res = await callAs(ignoring.url, own.apiKey, {
    path: '/api/ignored',
    headers: [
      ['traceparent', traceparent()],
      ['tracestate', 'vendor=kept'],
    ],
  })
  t.equal(res.status, 200)
  const span = await serverSpan(json, 'GET /api')
  t.not(span.traceId, CLIENT_TRACE, 'a trace of its own')
  t.equal(span.parentSpanId, '', 'a root span')
  t.same(span.links, [{ traceId: CLIENT_TRACE, spanId: CLIENT_SPAN }], "linked to the client's span")
  t.ok(
    json.contentTypes.every((type) => type.startsWith('application/json')),
    'posted as OTLP/JSON',
  )
  const [, traceId] = String(upstream.received.at(-1)!.headers.traceparent).split('-')
  t.equal(traceId, span.traceId, "the upstream gets the gateway's trace")
  t.equal(upstream.received.at(-1)!.headers.tracestate, 'vendor=kept', "and the client's tracestate")
})

t.test('tracing off: the client’s traceparent passes as any other header', async (t) => {
  const plain = await startGateway(t, { gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] } })
  const own = await plain.createParent()
  const res = await callAs(plain.url, own.apiKey, { path: '/api/off', headers: [['traceparent', traceparent()]] })
  t.equal(res.status, 200)
  t.equal(upstream.received.at(-1)!.headers.traceparent, traceparent(), 'untouched')
})

// Last: every byte exported so far, by every test above.
t.test('nothing exported holds a key, a secret, a token, a cookie, a query string or a body', async (t) => {
  await until(10_000, async () => collector.spans.length > 0)
  const exported = Buffer.concat(collector.bodies).toString('latin1')
  const forbiddenValues = [
    parent.apiKey,
    parent.apiKey.slice(-20),
    'cookie-value-never-exported',
    'secret-query',
    'hush',
    'never-exported',
    'Bearer',
  ]
  for (const forbidden of forbiddenValues)
    t.notOk(exported.includes(forbidden), `no ${forbidden.slice(0, 12)}… in what was exported`)
})
