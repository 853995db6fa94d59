// Transfer codings the gateway cannot decode are refused (docs/api.md, "Before routing"; RFC 9112
// §6.1): a request whose Transfer-Encoding is anything but `chunked` alone is `501
// not_implemented`, on a proxied route and on a management one, and nothing reaches the upstream.
// A raw socket client, so that each value goes out exactly as written; the forms Node's own parser
// refuses (`identity`, `gzip`: chunked not last) and those it accepts (`gzip, chunked`) alike.
import { gzipSync } from 'node:zlib'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { type HeaderLines, rawExchange, requestBytes } from '../helpers/hostile.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, { upstreamUrl: upstream.url })
const parent = await gw.createParent()

/** A chunked body whose one chunk is `bytes`. */
const chunked = (bytes: Buffer) =>
  Buffer.concat([Buffer.from(`${bytes.length.toString(16)}\r\n`), bytes, Buffer.from('\r\n0\r\n\r\n')])

const body = chunked(gzipSync('{"name":"compressed"}'))

/** Transfer-Encoding values, as one field or several, that name more or other than chunked. */
const REFUSED: [string, HeaderLines][] = [
  ['gzip, chunked', [['Transfer-Encoding', 'gzip, chunked']]],
  ['GZIP, Chunked', [['Transfer-Encoding', 'GZIP, Chunked']]],
  ['deflate, chunked', [['Transfer-Encoding', 'deflate, chunked']]],
  ['an unknown coding, chunked', [['Transfer-Encoding', 'x-custom, chunked']]],
  ['identity, chunked', [['Transfer-Encoding', 'identity, chunked']]],
  ['an empty element, chunked', [['Transfer-Encoding', ', chunked']]],
  [
    'gzip and chunked in two fields',
    [
      ['Transfer-Encoding', 'gzip'],
      ['Transfer-Encoding', 'chunked'],
    ],
  ],
  // Node's parser refuses these itself (chunked not last): answered on the socket, as 501 too.
  ['identity', [['Transfer-Encoding', 'identity']]],
  ['gzip', [['Transfer-Encoding', 'gzip']]],
  ['chunked, gzip', [['Transfer-Encoding', 'chunked, gzip']]],
  ['chunked, chunked', [['Transfer-Encoding', 'chunked, chunked']]],
]

const PATHS: [string, string][] = [
  ['a proxied route', '/things/compressed'],
  ['a management route', '/v1/sub-accounts'],
]

for (const [where, path] of PATHS) {
  t.test(`${where}: a coding other than chunked alone is 501, and nothing is forwarded`, async (t) => {
    for (const [what, framing] of REFUSED) {
      const before = upstream.received.length
      const exchange = await rawExchange(
        gw.port,
        requestBytes({
          method: 'POST',
          target: path,
          headers: [
            ['Host', 'x'],
            ['Authorization', `Bearer ${parent.apiKey}`],
            ['Content-Type', 'application/json'],
            ...framing,
          ],
          body,
        }),
        { waitMs: 3000 },
      )
      const answer = exchange.responses[0]
      t.equal(answer?.status, 501, `${what}: 501 (${answer?.body.slice(0, 200)})`)
      t.equal(answer?.json().code, 'not_implemented', `${what}: not_implemented`)
      t.match(answer?.json().detail, /chunked alone/, `${what}: the detail says what to send`)
      t.equal(exchange.responses.length, 1, `${what}: one answer, the body read as no request`)
      t.ok(exchange.closedByServer, `${what}: the connection is closed`)
      t.equal(upstream.received.length, before, `${what}: the upstream got nothing`)
    }
  })
}

t.test('chunked alone, in any case, still passes', async (t) => {
  for (const value of ['chunked', 'Chunked']) {
    const before = upstream.received.length
    const exchange = await rawExchange(
      gw.port,
      requestBytes({
        method: 'POST',
        target: '/things/plain',
        headers: [
          ['Host', 'x'],
          ['Authorization', `Bearer ${parent.apiKey}`],
          ['Transfer-Encoding', value],
          ['Connection', 'close'],
        ],
        body: chunked(Buffer.from('hello')),
      }),
    )
    t.equal(exchange.responses[0]?.status, 200, `${value}: proxied`)
    t.equal(upstream.received.length, before + 1, `${value}: the upstream got it`)
    t.equal(upstream.received.at(-1)?.bodyBytes, 5, `${value}: its body, decoded`)
  }
})
