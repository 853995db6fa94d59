// No upstream plants the portal's session (docs/api.md, "What comes back" and Portal sessions),
// over real sockets: an upstream that writes its Set-Cookie as raw bytes, in the spellings a
// browser may read as `tgw_portal` (a byte 0x80–0xFF before the name, as Chromium took
// `\xA0tgw_portal`; upper case; `__Host-`; after a comma…), gets none of them to the client, while
// its other cookies pass; and the portal's API refuses a request that carries `tgw_portal` twice
// rather than pick one (the attacker's cookie, sent first for its longer path, was picked).
import { createServer, type Socket } from 'node:net'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import type { TestLike } from '../helpers/test-like.js'
import { listenOnLoopback } from '../helpers/upstream.js'

/** Answers `?v=<Set-Cookie as latin1, URL-encoded>` with that header, its bytes as they are. */
async function cookieUpstream(t: TestLike) {
  const server = createServer((socket: Socket) => {
    let head = ''
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1')
      if (!head.includes('\r\n\r\n')) return
      socket.off('data', onData)
      const target = head.slice(0, head.indexOf('\r\n')).split(' ')[1]!
      const values = new URL(target, 'http://upstream').searchParams.getAll('v')
      const lines = values.map((v) => `Set-Cookie: ${v}\r\n`).join('')
      socket.end(Buffer.from(`HTTP/1.1 200 OK\r\n${lines}Content-Length: 2\r\nConnection: close\r\n\r\nok`, 'latin1'))
    }
    socket.on('data', onData)
    socket.on('error', () => {})
  })
  const { port } = await listenOnLoopback(t, server)
  return `http://127.0.0.1:${port}`
}

const upstream = await cookieUpstream(t)
const gw = await startGateway(t, {
  gatewayConfig: { routes: [{ prefix: '/public', upstream, public: true }] },
})
const parent = await gw.createParent({ name: 'Provider' })

/** The Set-Cookie lines the client gets when the upstream sends `values` (latin1 strings). */
async function passed(values: readonly string[]): Promise<{ status: number; cookies: string[] }> {
  const query = values.map((v) => `v=${encodeURIComponent(v)}`).join('&')
  const res = await rawRequest(gw.url, { path: `/public/cookie?${query}` })
  const header = res.headers['set-cookie']
  return { status: res.status, cookies: header === undefined ? [] : header.map((c) => c) }
}

t.test('no spelling of tgw_portal passes, raw bytes included; other cookies do', async (t) => {
  const planted = 'tgwps_plantedvalue'
  const variants = [
    `\xa0tgw_portal=${planted}; Path=/portal/api`,
    `\xa0tgw_portal=${planted}; Path=/portal/api; Max-Age=3000`,
    `TGW_PORTAL=${planted}; Path=/portal/`,
    `Tgw_Portal=${planted}`,
    `__Host-tgw_portal=${planted}; Secure; Path=/`,
    `__Secure-TGW_portal=${planted}; Secure`,
    `__Host-\xa0tgw_portal=${planted}; Secure; Path=/`,
    `a=b, tgw_portal=${planted}; Path=/portal/api`,
    `a=b,\xa0tgw_portal=${planted}`,
    `"tgw_portal"=${planted}`,
    `tgw_portal\xa0=${planted}`,
    `=tgw_portal=${planted}`,
    // U+FEFF as its UTF-8 bytes, which the gateway reads as latin1.
    `\xef\xbb\xbftgw_portal=${planted}`,
    `a=${planted}; Path=/portal/tgw_x`,
  ]
  for (let byte = 0x80; byte <= 0xff; byte++)
    variants.push(`${String.fromCharCode(byte)}tgw_portal=${planted}; Path=/portal/api`)
  for (const variant of variants) {
    const { status, cookies } = await passed([variant, 'kept=1; Path=/'])
    t.equal(status, 200, `${JSON.stringify(variant)}: the answer passes`)
    t.same(cookies, ['kept=1; Path=/'], `${JSON.stringify(variant)}: removed, the other cookie kept`)
  }
  // Control bytes: undici refuses such an answer (502); either way no cookie of the gateway's passes.
  for (const variant of [`\x0btgw_portal=${planted}`, `\x0ctgw_portal=${planted}`, `\x01tgw_portal=${planted}`]) {
    const { cookies } = await passed([variant, 'kept=1'])
    t.notOk(
      cookies.some((c) => /tgw_/i.test(c)),
      `${JSON.stringify(variant)}: never passed`,
    )
  }
  const alone = await passed([`\xa0tgw_portal=${planted}; Path=/portal/api`])
  t.same(alone.cookies, [], 'alone: no Set-Cookie at all')
})

t.test('the portal takes one tgw_portal cookie, never one of two', async (t) => {
  const { id } = (
    await gw.call(parent.apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name: 'Victim' } })
  ).json()
  const made = await gw.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${id}/portal-sessions`,
    acting: 'self',
    body: { permissions: ['keys:read'] },
  })
  const token = new URL(made.json().url).hash.slice(1)
  const exchange = await fetch(`${gw.url}/portal/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token }),
  })
  t.equal(exchange.status, 201, 'the link exchanged')
  const own = /tgw_portal=([^;]+)/.exec(exchange.headers.get('set-cookie') ?? '')![1]!
  const other = `tgwps_${'A'.repeat(43)}`

  const one = await rawRequest(gw.url, { path: '/portal/api/session', headers: [['Cookie', `tgw_portal=${own}`]] })
  t.equal(one.status, 200, 'its own cookie alone: the session')
  for (const [what, headers] of [
    ['the planted one first', [['Cookie', `tgw_portal=${other}; tgw_portal=${own}`]]],
    ['the planted one last', [['Cookie', `tgw_portal=${own}; tgw_portal=${other}`]]],
    ['the same value twice', [['Cookie', `tgw_portal=${own}; a=1; tgw_portal=${own}`]]],
    ['blanks around the second name', [['Cookie', `tgw_portal=${own};   tgw_portal = ${other}`]]],
    [
      'in two Cookie lines',
      [
        ['Cookie', `tgw_portal=${own}`],
        ['Cookie', `tgw_portal=${other}`],
      ],
    ],
  ] as [string, [string, string][]][]) {
    const res = await rawRequest(gw.url, { path: '/portal/api/session', headers })
    const body = checkProblem(t, res, 401, 'unauthenticated', what)
    t.match(String(body.detail), /more than one portal session cookie.*clear the cookies/, `${what}: says what to do`)
    const keys = await rawRequest(gw.url, { path: '/portal/api/keys', headers })
    t.equal(keys.status, 401, `${what}: no other call either`)
  }
  const other1 = await rawRequest(gw.url, {
    path: '/portal/api/session',
    headers: [['Cookie', `TGW_PORTAL=${other}; tgw_portalx=${other}; tgw_portal=${own}`]],
  })
  t.equal(other1.status, 200, 'cookies of other names are not the session')
})
