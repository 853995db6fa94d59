// Every failure is problem+json (docs/api.md): fastify's own errors too, and a 5xx shows no
// internals.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

t.test('errors', async (t) => {
  const gw = await startGateway(t, { listen: false, redis: false })
  const key = (await gw.createParent()).apiKey

  t.test('unknown routes are 404 route_not_found', async (t) => {
    for (const [method, url] of [
      ['GET', '/'],
      ['GET', '/v2/sub-accounts'],
      ['DELETE', '/v1/sub-accounts/00000000-0000-4000-8000-000000000000'],
      ['PUT', '/v1/sub-accounts'],
      ['GET', '/v1/sub-accounts/a/b/c/d'],
    ] as const) {
      const res = await gw.call(key, { method, url })
      t.equal(res.statusCode, 404, `${method} ${url}`)
      t.equal(problemOf(res).code, 'route_not_found')
    }
  })

  t.test('a body that is not JSON is 400 invalid_json', async (t) => {
    for (const body of ['{', '{"name": "a",}', 'nul', '{"name": "a"} trailing']) {
      const res = await gw.call(key, { method: 'POST', url: '/v1/sub-accounts', body })
      t.equal(res.statusCode, 400, body)
      t.equal(problemOf(res).code, 'invalid_json')
    }
  })

  t.test(
    'a body whose bytes are not UTF-8 is 400 invalid_json, whatever charset it names, and makes nothing',
    async (t) => {
      // A parent of its own: one with sub-accounts must name the tenant it acts as, on every call.
      const key = (await gw.createParent()).apiKey
      const count = async () =>
        (await gw.call(key, { method: 'GET', url: '/v1/sub-accounts?limit=100' })).json().data.length as number
      const before = await count()
      for (const [bytes, type] of [
        [Buffer.from('{"name":"caf\xe9"}', 'latin1'), 'application/json; charset=iso-8859-1'],
        [Buffer.from('{"name":"caf\xe9"}', 'latin1'), 'application/json'],
        // A lone surrogate, encoded as UTF-8 must never encode one.
        [Buffer.from([...Buffer.from('{"name":"a'), 0xed, 0xa0, 0x80, ...Buffer.from('"}')]), 'application/json'],
      ] as const) {
        const res = await gw.app.inject({
          method: 'POST',
          url: '/v1/sub-accounts',
          headers: { authorization: `Bearer ${key}`, 'x-service-acting-tenant': 'self', 'content-type': type },
          payload: bytes,
        })
        t.equal(res.statusCode, 400, `${type}: ${bytes.toString('hex')}`)
        t.match(problemOf(res), { code: 'invalid_json', detail: /UTF-8/ })
      }
      // UTF-16's bytes of ASCII are UTF-8 with NULs between: not JSON, and said so where.
      const wide = await gw.app.inject({
        method: 'POST',
        url: '/v1/sub-accounts',
        headers: {
          authorization: `Bearer ${key}`,
          'x-service-acting-tenant': 'self',
          'content-type': 'application/json; charset=utf-16',
        },
        payload: Buffer.from('{"name":"a"}', 'utf16le'),
      })
      t.match(problemOf(wide), { status: 400, code: 'invalid_json' }, 'UTF-16')
      t.equal(await count(), before, 'no sub-account was made')
      // JSON is UTF-8 (RFC 8259): a charset parameter changes nothing when the bytes are.
      const named = await gw.app.inject({
        method: 'POST',
        url: '/v1/sub-accounts',
        headers: {
          authorization: `Bearer ${key}`,
          'x-service-acting-tenant': 'self',
          'content-type': 'application/json; charset=iso-8859-1',
        },
        payload: Buffer.from('{"name":"café"}', 'utf8'),
      })
      t.equal(named.statusCode, 201, 'UTF-8 bytes under another charset')
      t.equal(named.json().name, 'café')
    },
  )

  t.test('prototype-pollution keys are refused', async (t) => {
    for (const body of [
      '{"name":"a","__proto__":{"admin":true}}',
      '{"name":"a","metadata":{"__proto__":{"x":"1"}}}',
      '{"name":"a","constructor":{"prototype":{"x":1}}}',
    ]) {
      const res = await gw.call(key, { method: 'POST', url: '/v1/sub-accounts', body })
      t.equal(res.statusCode, 400, body)
      t.equal(problemOf(res).code, 'invalid_json')
    }
    t.equal(({} as Record<string, unknown>).admin, undefined)
  })

  t.test('a wrong content type is 415', async (t) => {
    for (const type of [
      'text/plain',
      'application/x-www-form-urlencoded',
      'application/xml',
      'multipart/form-data; boundary=x',
    ]) {
      const res = await gw.call(key, {
        method: 'POST',
        url: '/v1/sub-accounts',
        body: 'name=a',
        headers: { 'content-type': type },
      })
      t.equal(res.statusCode, 415, type)
      t.equal(problemOf(res).code, 'unsupported_media_type')
    }
    const charset = await gw.call(key, {
      method: 'POST',
      url: '/v1/sub-accounts',
      body: '{"name":"utf8"}',
      headers: { 'content-type': 'application/json; charset=utf-8' },
    })
    t.equal(charset.statusCode, 201, 'a charset parameter is fine')
  })

  t.test('a body over the limit is 413', async (t) => {
    const res = await gw.call(key, {
      method: 'POST',
      url: '/v1/sub-accounts',
      acting: 'self',
      body: { name: 'a', metadata: { k: 'x'.repeat(70_000) } },
    })
    t.equal(res.statusCode, 413)
    t.equal(problemOf(res).code, 'payload_too_large')
  })

  t.test("the router's own errors are problem+json too", async (t) => {
    const badEncoding = await gw.call(key, { method: 'GET', url: '/v1/sub-accounts/%zz' })
    t.equal(badEncoding.statusCode, 400)
    t.equal(problemOf(badEncoding).code, 'bad_request')
    t.ok(badEncoding.headers['x-request-id'])
    const overlong = await gw.call(key, { method: 'GET', url: `/v1/sub-accounts/${'a'.repeat(300)}` })
    t.equal(overlong.statusCode, 404)
    t.equal(problemOf(overlong).code, 'not_found')
  })

  t.test('request ids', async (t) => {
    const kept = await gw.call(key, { method: 'GET', url: '/nowhere', headers: { 'x-request-id': 'trace-123.abc' } })
    t.equal(kept.headers['x-request-id'], 'trace-123.abc')
    t.equal(problemOf(kept).request_id, 'trace-123.abc')
    const replaced = await gw.call(key, {
      method: 'GET',
      url: '/nowhere',
      headers: { 'x-request-id': 'bad id\twith junk' },
    })
    t.match(replaced.headers['x-request-id'], /^[0-9a-f-]{36}$/)
    t.equal(problemOf(replaced).request_id, replaced.headers['x-request-id'])
  })
})

t.test('a 500 shows no internals', async (t) => {
  const gw = await startGateway(t, { listen: false, redis: false })
  gw.app.get('/v1/explode', async () => {
    throw new Error('password=hunter2 at /srv/secret/file.ts:12')
  })
  const res = await gw.call(null, { method: 'GET', url: '/v1/explode' })
  t.equal(res.statusCode, 500)
  const problem = problemOf(res)
  t.equal(problem.code, 'internal_error')
  t.notMatch(res.body, /hunter2|secret|file\.ts|Error/)
})

t.test('an unreachable store is 503 store_unavailable, never a pass', async (t) => {
  const gw = await startGateway(t, { listen: false, redis: false })
  const parent = await gw.createParent()
  await gw.sql.end()
  const res = await gw.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts' })
  t.equal(res.statusCode, 503)
  t.equal(problemOf(res).code, 'store_unavailable')
  t.notMatch(res.body, /CONNECTION|postgres/i)
})

t.test('20 concurrent creates with one external_id: one 201, nineteen 409', async (t) => {
  const gw = await startGateway(t, { listen: false, redis: false })
  const parent = await gw.createParent()
  const results = await Promise.all(
    Array.from({ length: 20 }, (_, i) =>
      gw.call(parent.apiKey, {
        method: 'POST',
        url: '/v1/sub-accounts',
        acting: 'self',
        body: { name: `racer ${i}`, external_id: 'contested' },
      }),
    ),
  )
  const statuses = results.map((r) => r.statusCode).sort()
  t.same(statuses, [201, ...Array(19).fill(409)])
  for (const r of results.filter((r) => r.statusCode === 409)) t.equal(problemOf(r).code, 'external_id_conflict')
  const rows = await gw.sql`select count(*)::int as n from tenants where external_id = 'contested'`
  t.equal(rows[0]!.n, 1)
})
