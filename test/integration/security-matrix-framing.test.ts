// The security matrix: one case per line, each named after the guarantee it holds the gateway to.
// Other files prove much of this more broadly (proxy-headers, proxy-routing, security, replicas);
// here each attack has its own line, so that a regression names the attack it lets through.
// This file: ambiguous framing (request smuggling), pipelining, what Node's parser refuses, Expect.
// The deployment and the shared tools: test/helpers/security-deployment.ts.
import t from 'tap'
import { isParserRefusal, nextMarker, problemIssue, rawExchange, requestBytes } from '../helpers/hostile.js'
import { auth, catchAll, owner, portA, randomWellFormedKey, raw, received } from '../helpers/security-deployment.js'
import { refused, smuggle } from '../helpers/security-deployment.js'

t.test(
  'smuggling: Content-Length together with Transfer-Encoding: chunked is 400, the smuggled request never arrives',
  async (t) => {
    await smuggle(
      t,
      [
        ['Content-Length', '5'],
        ['Transfer-Encoding', 'chunked'],
      ],
      '0\r\n\r\n',
    )
  },
)

t.test('smuggling: two Content-Length headers with different values are 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '0'],
      ['Content-Length', '90'],
    ],
    '',
  )
})

t.test('smuggling: Content-Length with Transfer-Encoding: Chunked (odd casing) is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding', 'ChUnKeD'],
    ],
    '0\r\n\r\n',
  )
})

t.test('smuggling: Content-Length with Transfer-Encoding padded by spaces and a tab is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding', ' \tchunked\t '],
    ],
    '0\r\n\r\n',
  )
})

t.test('smuggling: Content-Length with Transfer-Encoding: xchunked is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding', 'xchunked'],
    ],
    '0\r\n\r\n',
  )
})

t.test('smuggling: Transfer-Encoding: chunked, identity (chunked not last) is 501, a coding not decoded', async (t) => {
  await smuggle(t, [['Transfer-Encoding', 'chunked, identity']], '0\r\n\r\n', 501)
})

t.test('smuggling: a Transfer-Encoding line folded onto the next (obs-fold) is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding', '\r\n chunked'],
    ],
    '0\r\n\r\n',
  )
})

t.test('smuggling: a space before the colon of Transfer-Encoding is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding ', 'chunked'],
    ],
    '0\r\n\r\n',
  )
})

t.test('pipelining: a well-framed second request on the same connection is authenticated on its own', async (t) => {
  const first = nextMarker('pipe')
  const second = nextMarker('pipe')
  const bytes = Buffer.concat([
    requestBytes({
      method: 'POST',
      target: '/pipelined/1',
      headers: [
        ['Host', 'x'],
        ['X-Request-Id', first],
        auth(owner.apiKey),
        ['X-Service-Acting-Tenant', 'self'],
        ['Content-Length', '5'],
      ],
      body: 'hello',
    }),
    requestBytes({
      method: 'GET',
      target: '/pipelined/2',
      headers: [
        ['Host', 'x'],
        ['X-Request-Id', second],
        ['Connection', 'close'],
      ],
    }),
  ])
  const exchange = await rawExchange(portA, bytes, { until: 2 })
  t.same(
    exchange.responses.map((r) => r.status),
    [200, 401],
    'the first is proxied, the second (no key) refused',
  )
  t.equal(catchAll.byMarker(first).length, 1, 'the upstream received the first')
  t.equal(received(second), 0, 'and not the second')
})

t.test("a request Node's HTTP parser refuses is answered in problem+json, and the connection closed", async (t) => {
  const marker = nextMarker('parser')
  const bytes = Buffer.from(`GET /orders/${marker} HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n`)
  // Read until the server closes (or 1.5 s).
  const exchange = await rawExchange(portA, bytes, { waitMs: 1500 })
  const res = exchange.responses[0]
  t.ok(res !== undefined && isParserRefusal(res), `refused by the parser (${res?.status} ${res?.body.slice(0, 120)})`)
  t.equal(
    res === undefined ? 'no answer' : problemIssue(res, { status: 400, code: 'bad_request' }),
    null,
    'as problem+json',
  )
  t.ok(exchange.closedByServer, 'connection closed')
  const big = requestBytes({
    method: 'GET',
    target: `/orders/${marker}`,
    headers: [
      ['Host', 'x'],
      ['X-Big', 'v'.repeat(20_000)],
    ],
  })
  const huge = (await rawExchange(portA, big, { until: 1 })).responses[0]
  t.equal(
    huge === undefined ? 'no answer' : problemIssue(huge, { status: 431, code: 'headers_too_large' }),
    null,
    'a head over 16 KiB: 431 problem+json',
  )
  t.equal(received(marker), 0, 'no upstream received either')
})

t.test('two Host headers are 400 (RFC 9112 §3.2) and reach no upstream', async (t) => {
  await refused(t, 'GET', '/orders/1', [['Host', 'evil.example'], auth(owner.apiKey)], 400, 'bad_request')
})

t.test('Expect: 100-continue with an unknown key: the 401 is the only answer, with no 100 before it', async (t) => {
  const { marker, exchange } = raw('POST', '/v1/shipments', [
    auth(randomWellFormedKey()),
    ['Expect', '100-continue'],
    ['Content-Length', '5'],
  ])
  const res = (await exchange).responses[0]
  t.equal(res?.status, 401, `the first answer is the refusal (${res?.status})`)
  t.equal(received(marker), 0, 'no upstream received it')
})
