// The upstream's Location and Set-Cookie as the client gets them (src/proxy/answer-headers.ts,
// docs/api.md, "What comes back"): a Location moved under the route's prefix only when it names the
// upstream's prefix at a segment boundary, or its own origin there; a Set-Cookie of a gateway
// cookie removed, in every spelling a browser reads as one.
import type { IncomingHttpHeaders } from 'node:http'
import t from 'tap'
import { AnswerHeaders, cookiesForClient, setsGatewayCookie } from '../../src/proxy/answer-headers.js'

const UPSTREAM = 'http://10.0.0.5:8080'
// A route `/v1` to `http://10.0.0.5:8080/internal`: the upstream sees /internal/v1/….
const based = new AnswerHeaders(new URL(`${UPSTREAM}/internal`), '/internal/v1', '/v1')
// A catch-all to the same upstream's /root: the upstream sees /root/….
const catchAll = new AnswerHeaders(new URL(`${UPSTREAM}/root`), '/root', '')
// A route without a base path: the upstream sees the client's own paths.
const plain = new AnswerHeaders(new URL(UPSTREAM), '/v1', '/v1')

t.test('a Location under the upstream prefix, at a segment boundary, is moved under the route', async (t) => {
  const cases: [AnswerHeaders, string, string][] = [
    [based, '/internal/v1/x', '/v1/x'],
    [based, '/internal/v1', '/v1'],
    [based, '/internal/v1/', '/v1/'],
    [based, '/internal/v1?q=1', '/v1?q=1'],
    [based, '/internal/v1#top', '/v1#top'],
    [based, '/internal/v1/a/b?c=d#e', '/v1/a/b?c=d#e'],
    [based, `${UPSTREAM}/internal/v1/x?y`, '/v1/x?y'],
    [based, 'HTTP://10.0.0.5:8080/internal/v1/x', '/v1/x'],
    [based, 'http://10.0.0.5:8080/internal/v1', '/v1'],
    [catchAll, '/root/x', '/x'],
    [catchAll, '/root', '/'],
    [catchAll, '/root?q', '/?q'],
    [catchAll, `${UPSTREAM}/root/x`, '/x'],
    // Without a base path, an absolute URL of the upstream's own origin is still the upstream's.
    [plain, `${UPSTREAM}/v1/x`, '/v1/x'],
    [plain, 'http://10.0.0.5:8080/v1', '/v1'],
  ]
  for (const [rules, location, expected] of cases) t.equal(rules.clientLocation(location), expected, location)
})

t.test('any other Location passes byte for byte', async (t) => {
  const cases: [AnswerHeaders, string][] = [
    [based, '/internal/v1ment'],
    [based, '/internal/v1.old/x'],
    [based, '/internal/basement'],
    [based, '/other/internal/v1/x'],
    [based, '/internal/other'],
    [based, '/Internal/V1/x'],
    [based, '/internal/v1/../../admin'],
    [based, '/internal/v1/%2e%2e/%2E%2E/admin'],
    [based, '//evil.example/internal/v1/x'],
    [based, '//10.0.0.5:8080/internal/v1/x'],
    [based, '/\\evil.example/internal/v1/x'],
    [based, '\\\\evil.example/internal/v1/x'],
    [based, 'http://evil.example/internal/v1/x'],
    [based, 'http://10.0.0.5:8081/internal/v1/x'],
    [based, 'https://10.0.0.5:8080/internal/v1/x'],
    [based, 'http://user:pw@10.0.0.5:8080/internal/v1/x'],
    [based, 'http://10.0.0.5:8080/internal/v1ment'],
    [based, 'ftp://10.0.0.5:8080/internal/v1/x'],
    [based, 'javascript:alert(1)'],
    [based, 'x/internal/v1'],
    [based, '../v1/x'],
    [based, '?page=2'],
    [based, ''],
    [based, ' /internal/v1/x'],
    [based, 'http://[::1'],
    [catchAll, '/rootkit'],
    [catchAll, '/other'],
    [catchAll, '//evil.example/root/x'],
    [plain, '/v1/x'],
    [plain, '/internal/v1/x'],
    [plain, 'http://evil.example/v1/x'],
  ]
  for (const [rules, location] of cases) t.equal(rules.clientLocation(location), location, JSON.stringify(location))
})

t.test('apply: each Location of a repeated header, and nothing when there is none', async (t) => {
  const headers = { location: ['/internal/v1/a', '/internal/vx'] } as unknown as IncomingHttpHeaders
  based.apply(headers)
  t.same(headers.location, ['/v1/a', '/internal/vx'])
  const none: IncomingHttpHeaders = { 'content-type': 'text/plain' }
  based.apply(none)
  t.same(none, { 'content-type': 'text/plain' }, 'an answer without either header is left as it is')
})

t.test(
  'a Set-Cookie holding tgw_ anywhere, in any case: every spelling a browser may read as a gateway cookie',
  async (t) => {
    const gateways = [
      'tgw_portal=tgwps_x',
      'tgw_portal=x; Path=/portal/; HttpOnly; SameSite=Strict',
      'tgw_portal=x; Domain=example.com; Path=/',
      'TGW_PORTAL=x',
      'Tgw_Portal=x; Path=/',
      'tgw_other=1',
      'tgw_=1',
      ' tgw_portal=x',
      '\ttgw_portal=x',
      'tgw_portal',
      'tgw_portal; Path=/',
      '=tgw_portal=x',
      ' = tgw_portal=x',
      '__Host-tgw_portal=x; Secure; Path=/',
      '__Secure-tgw_portal=x; Secure',
      '__HOST-TGW_portal=x; Secure; Path=/',
      '__secure-tgw_x=1',
      'a=1, tgw_portal=x',
      'a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT,tgw_portal=x',
      // Bytes before the name that a browser may skip (Chromium stored `\xA0tgw_portal` as `tgw_portal`).
      '\xa0tgw_portal=x; Path=/portal/api',
      '\x80tgw_portal=x',
      '\xfftgw_portal=x',
      '\x0btgw_portal=x',
      '\x0ctgw_portal=x',
      '\ufefftgw_portal=x',
      '\u3000tgw_portal=x',
      '"tgw_portal"=x',
      'tgw_portal\xa0=x',
      '__Host-\xa0tgw_portal=x; Secure; Path=/',
      'a=b,\xa0tgw_portal=x',
      // Anything else holding tgw_: a superset of the names, which no upstream needs to send.
      'xtgw_portal=1',
      'my_tgw_portal=1',
      'a=tgw_portal',
      'a=1; Path=/tgw_portal',
      'a=1; Domain=TGW_.example',
    ]
    for (const byte of [0x80, 0x85, 0x9f, 0xa0, 0xad, 0xc2, 0xfe, 0xff])
      gateways.push(`${String.fromCharCode(byte)}tgw_portal=x; Path=/portal/api`)
    for (const value of gateways) t.ok(setsGatewayCookie(value), `removed: ${JSON.stringify(value)}`)
    const others = [
      'a=1',
      'session=abc; Path=/; HttpOnly',
      'tgw=1',
      'tgw-portal=1',
      'tgwportal=1',
      'tgw.portal=1',
      'tg_w_portal=1',
      '__Host-session=1; Secure; Path=/',
      'a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT',
    ]
    for (const value of others) t.notOk(setsGatewayCookie(value), `kept: ${JSON.stringify(value)}`)
  },
)

t.test('each Set-Cookie value judged alone', async (t) => {
  const mixed = ['a=1', 'tgw_portal=x', 'b=2; Path=/', 'TGW_PORTAL=y; Path=/portal/']
  t.same(cookiesForClient(mixed), ['a=1', 'b=2; Path=/'])
  const clean = ['a=1', 'b=2']
  t.equal(cookiesForClient(clean), clean, 'the same array when none is removed')
  t.equal(cookiesForClient(['tgw_portal=x', '__Host-tgw_portal=y']), null, 'none left: no header')
  t.equal(cookiesForClient('tgw_portal=x'), null, 'a single value')
  t.equal(cookiesForClient('a=1'), 'a=1')

  const headers = { 'set-cookie': ['tgw_portal=x'], 'content-length': '0' } as IncomingHttpHeaders
  based.apply(headers)
  t.same(headers, { 'content-length': '0' }, 'apply: the header is gone when nothing is left')
  const kept = { 'set-cookie': ['a=1', 'tgw_portal=x'] } as IncomingHttpHeaders
  based.apply(kept)
  t.same(kept, { 'set-cookie': ['a=1'] })
  const single = { 'set-cookie': 'a=1' } as unknown as IncomingHttpHeaders
  based.apply(single)
  t.same(single, { 'set-cookie': 'a=1' }, 'a single value, as undici gives it')
})
