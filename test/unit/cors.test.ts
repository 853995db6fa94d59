// A route's `cors` (src/proxy/cors/): the route table's refusals of a wrong policy, and the
// preflight's and the actual answer's decisions, as plain functions.
import t from 'tap'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import { actualAnswerHeaders, decidePreflight, isPreflight, requestedHeaderNames } from '../../src/proxy/cors/policy.js'
import { parseRouteCors } from '../../src/proxy/cors/route-options.js'
import { AnswerHeaders } from '../../src/proxy/answer-headers.js'
import { refuses, second, UP, WHERE } from '../helpers/route-table.js'

const APP = 'https://app.example.com'

function cors(value: unknown) {
  const [, route] = loadRouteTable(second({ cors: value }), undefined)
  return route!.cors!
}

t.test('the route table reads a policy, with its defaults', async (t) => {
  const [plain] = loadRouteTable({ routes: [{ prefix: '/v1/a', upstream: UP }] }, undefined)
  t.equal(plain!.cors, null, 'without cors, none')
  const policy = cors({ origins: [APP, 'http://127.0.0.1:5173', 'http://localhost:3000', 'http://[::1]:8000'] })
  t.same([...policy.origins!], [APP, 'http://127.0.0.1:5173', 'http://localhost:3000', 'http://[::1]:8000'])
  t.same(policy.methods, ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'])
  t.same([...policy.headers], ['authorization', 'content-type', 'x-service-acting-tenant', 'idempotency-key'])
  t.same(policy.exposeHeaders, ['ratelimit', 'ratelimit-policy', 'retry-after', 'x-request-id'])
  t.equal(policy.credentials, false)
  t.equal(policy.maxAgeSeconds, null)
  const full = cors({
    origins: ['*'],
    methods: ['GET', 'POST'],
    headers: ['X-Trace-Id', 'Authorization'],
    expose_headers: ['ETag'],
    max_age_seconds: 600,
  })
  t.equal(full.origins, null, '* is any origin')
  t.same(full.originList, ['*'])
  t.same(full.methods, ['GET', 'POST'])
  t.ok(full.headers.has('x-trace-id') && full.headers.has('authorization'), 'headers add to the four, lower case')
  t.same(full.exposeHeaders, ['ratelimit', 'ratelimit-policy', 'retry-after', 'x-request-id', 'etag'])
  t.equal(full.maxAgeSeconds, 600)
  t.equal(cors({ origins: [APP], credentials: true }).credentials, true)
})

t.test('the route table refuses a wrong policy, naming the route and the rule', async (t) => {
  const cases: [string, unknown, RegExp][] = [
    ['not a mapping', ['https://a.example'], /cors must be a mapping/],
    ['an unknown key', { origins: [APP], origin: APP }, /unknown key "origin"/],
    ['no origins', {}, /cors.origins must be a list/],
    ['empty origins', { origins: [] }, /cors.origins must be a list/],
    ['* with credentials', { origins: ['*'], credentials: true }, /may not be "\*" with credentials/],
    ['* beside an origin', { origins: ['*', APP] }, /"\*" stands alone/],
    ['plain http elsewhere than loopback', { origins: ['http://app.example.com'] }, /must be https:\/\/.*loopback/],
    ['a path', { origins: ['https://app.example.com/'] }, /write https:\/\/app.example.com$/],
    ['upper case', { origins: ['https://App.example.com'] }, /write https:\/\/app.example.com$/],
    ['a default port', { origins: ['https://app.example.com:443'] }, /write https:\/\/app.example.com$/],
    ['no origin at all', { origins: ['app.example.com'] }, /is not an origin/],
    ['a number', { origins: [7] }, /cors.origins\[0\] must be an origin/],
    ['another scheme', { origins: ['ftp://app.example.com'] }, /must be https/],
    [
      'a method in lower case',
      { origins: [APP], methods: ['get'] },
      /cors.methods must be a list of GET.*"get" is not one/,
    ],
    ['a method the route does not proxy', { origins: [APP], methods: ['TRACE'] }, /"TRACE" is not one/],
    ['no methods', { origins: [APP], methods: [] }, /cors.methods must be a list/],
    [
      'a header that is no name',
      { origins: [APP], headers: ['x trace'] },
      /cors.headers must be a list of header names/,
    ],
    ['expose_headers not a list', { origins: [APP], expose_headers: 'ETag' }, /cors.expose_headers must be a list/],
    ['credentials not a boolean', { origins: [APP], credentials: 'yes' }, /cors.credentials must be true or false/],
    [
      'a max age past a day',
      { origins: [APP], max_age_seconds: 86_401 },
      /max_age_seconds must be a whole number from 0 to 86400/,
    ],
    ['a fractional max age', { origins: [APP], max_age_seconds: 1.5 }, /max_age_seconds must be a whole number/],
  ]
  for (const [name, value, mentions] of cases) refuses(t, second({ cors: value }), WHERE, name, undefined, mentions)
})

t.test('a preflight is OPTIONS with Origin and Access-Control-Request-Method', async (t) => {
  t.ok(isPreflight('OPTIONS', { origin: APP, 'access-control-request-method': 'GET' }))
  t.notOk(isPreflight('OPTIONS', { origin: APP }), 'an OPTIONS without the method asked is a request')
  t.notOk(isPreflight('OPTIONS', { 'access-control-request-method': 'GET' }), 'nor without Origin')
  t.notOk(isPreflight('GET', { origin: APP, 'access-control-request-method': 'GET' }))
})

t.test('the header list of a preflight', async (t) => {
  t.same(requestedHeaderNames(undefined), [])
  t.same(requestedHeaderNames('authorization,Content-Type , x-trace-id,,'), [
    'authorization',
    'content-type',
    'x-trace-id',
  ])
  t.equal(requestedHeaderNames('x trace'), null, 'a name with a space is none')
  t.equal(requestedHeaderNames('a:b'), null)
})

t.test('a preflight decided', async (t) => {
  const policy = cors({
    origins: [APP],
    methods: ['GET', 'POST'],
    headers: ['X-Trace-Id'],
    credentials: true,
    max_age_seconds: 600,
  })
  const ask = (headers: Record<string, string>) =>
    decidePreflight(policy, { origin: APP, 'access-control-request-method': 'POST', ...headers }, '/v1/x')
  const allowed = ask({
    'access-control-request-headers': 'authorization,content-type,idempotency-key,x-service-acting-tenant,x-trace-id',
  })
  t.same(allowed, {
    allowed: true,
    headers: {
      'access-control-allow-origin': APP,
      'access-control-allow-methods': 'GET, POST',
      'access-control-allow-headers':
        'authorization, content-type, x-service-acting-tenant, idempotency-key, x-trace-id',
      'access-control-allow-credentials': 'true',
      'access-control-max-age': '600',
      vary: 'Origin',
    },
  })
  const refused = (decision: ReturnType<typeof ask>, mentions: RegExp, name: string) => {
    t.equal(decision.allowed, false, `${name}: refused`)
    if (!decision.allowed) t.match(decision.reason, mentions, `${name}: says why`)
  }
  refused(
    ask({ origin: 'https://evil.example' }),
    /origin "https:\/\/evil.example" may not call \/v1\/x/,
    'another origin',
  )
  refused(ask({ origin: 'https://app.example.com.evil.example' }), /may not call/, 'a longer host')
  refused(ask({ origin: 'http://app.example.com' }), /may not call/, 'the same host over http')
  refused(
    ask({ 'access-control-request-method': 'DELETE' }),
    /method "DELETE" is not allowed.*GET, POST/,
    'a method not listed',
  )
  refused(ask({ 'access-control-request-method': 'post' }), /method "post"/, 'a method in another case')
  refused(
    ask({ 'access-control-request-headers': 'authorization,x-other' }),
    /request header x-other is not allowed/,
    'a header not listed',
  )
  refused(
    ask({ 'access-control-request-headers': 'x y' }),
    /comma-separated list of header names/,
    'a list that is no list',
  )

  const any = cors({ origins: ['*'] })
  const anyOrigin = decidePreflight(
    any,
    { origin: 'https://elsewhere.example', 'access-control-request-method': 'GET' },
    '/v1/x',
  )
  t.equal(
    anyOrigin.allowed && anyOrigin.headers['access-control-allow-origin'],
    'https://elsewhere.example',
    '* echoes the origin',
  )
  t.notOk(anyOrigin.allowed && 'access-control-allow-credentials' in anyOrigin.headers, 'no credentials')
  t.notOk(anyOrigin.allowed && 'access-control-max-age' in anyOrigin.headers, 'no max age unless set')
  t.equal(
    decidePreflight(
      any,
      { origin: 'https://a.example, https://b.example', 'access-control-request-method': 'GET' },
      '/v1/x',
    ).allowed,
    false,
    'under *, two origins folded into one field are none',
  )
})

t.test("an actual request's answer fields", async (t) => {
  const policy = cors({ origins: [APP], expose_headers: ['ETag'], credentials: true })
  t.same(actualAnswerHeaders(policy, APP), {
    'access-control-allow-origin': APP,
    'access-control-expose-headers': 'ratelimit, ratelimit-policy, retry-after, x-request-id, etag',
    'access-control-allow-credentials': 'true',
    vary: 'Origin',
  })
  t.same(actualAnswerHeaders(policy, 'https://evil.example'), { vary: 'Origin' }, 'another origin: nothing of CORS')
  t.same(actualAnswerHeaders(policy, undefined), { vary: 'Origin' }, 'no origin (not a browser): nothing of CORS')
  t.equal(
    parseRouteCors(undefined, () => t.fail('no failure') as never),
    null,
  )
})

t.test("the upstream's Access-Control-* fields go on a CORS route, and only there", async (t) => {
  const upstream = () => ({
    'access-control-allow-origin': '*',
    'access-control-allow-credentials': 'true',
    'access-control-expose-headers': 'x-secret',
    'content-type': 'text/plain',
  })
  const withCors = upstream()
  new AnswerHeaders(new URL('http://up:1'), '/v1/x', '/v1/x', false, [], true).apply(withCors)
  t.same(withCors, { 'content-type': 'text/plain' })
  const without = upstream()
  new AnswerHeaders(new URL('http://up:1'), '/v1/x', '/v1/x').apply(without)
  t.same(without, upstream(), 'a route without cors passes them')
})
