// The upstream's path of a proxied request (src/proxy/upstream-call.ts): the route's prefix, as
// the client spelled it, replaced by the upstream's base path and the prefix; the rest as sent.
import t from 'tap'
import { rawPrefixLength, UpstreamTarget } from '../../src/proxy/upstream-target.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'

const routes = loadRouteTable(
  {
    routes: [
      { prefix: '/v1/things', upstream: 'http://127.0.0.1:1' },
      { prefix: '/v1/based', upstream: 'http://127.0.0.1:1/base/' },
    ],
  },
  'http://127.0.0.1:1/root',
)
const targetOf = (prefix: string) => {
  const target = new UpstreamTarget(
    routes.find((route) => route.prefix === prefix)!,
    { observe: () => {} } as never,
    () => false,
  )
  t.teardown(() => target.pool.destroy())
  return target
}

t.test('the prefix replaced, the rest and the query as sent', async (t) => {
  const things = targetOf('/v1/things')
  const based = targetOf('/v1/based')
  const catchAll = targetOf('/')
  const cases: [UpstreamTarget, string, string][] = [
    [things, '/v1/things', '/v1/things'],
    [things, '/v1/things/', '/v1/things/'],
    [things, '/v1/things?a=1', '/v1/things?a=1'],
    [things, '/v1/things/1?q=a+b&flag', '/v1/things/1?q=a+b&flag'],
    [things, '/v1/th%69ngs/1', '/v1/things/1'],
    [things, '/v1/things/%2e%2E', '/v1/things/%2e%2E'],
    [based, '/v1/based/x?y', '/base/v1/based/x?y'],
    [based, '/v1/based', '/base/v1/based'],
    [catchAll, '/', '/root/'],
    [catchAll, '/other?x', '/root/other?x'],
  ]
  for (const [target, url, expected] of cases) t.equal(target.upstreamPath(url), expected, url)
  t.equal(things.upstreamPath('/v1/thinks/1'), '/v1/thinks/1', 'a prefix not there: the path as it came')
})

t.test("a prefix's length in the raw path, percent-encodings decoded", async (t) => {
  t.equal(rawPrefixLength('/v1/things/1', '/v1/things'), 10)
  t.equal(rawPrefixLength('/v1/%74hings/1', '/v1/things'), 12, 'one encoded byte')
  t.equal(rawPrefixLength('/caf%C3%A9/x', '/café'), 10, 'a character of two encoded bytes')
  t.equal(rawPrefixLength('/%F0%9F%98%80/x', '/😀'), 13, 'of four')
  t.equal(rawPrefixLength('/caf%C3/x', '/café'), -1, 'a broken encoding')
  t.equal(rawPrefixLength('/v1/thin', '/v1/things'), -1, 'too short')
  t.equal(rawPrefixLength('/v1/other', '/v1/things'), -1, 'another path')
})
