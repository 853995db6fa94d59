// The security matrix: one case per line, each named after the guarantee it holds the gateway to.
// Other files prove much of this more broadly (proxy-headers, proxy-routing, security, replicas);
// here each attack has its own line, so that a regression names the attack it lets through.
// This file: paths that escape a route's prefix or shadow another route, and over-long ids.
// The deployment and the shared tools: test/helpers/security-deployment.ts.
import t from 'tap'
import { type HeaderLines, problemIssue, UPSTREAM_MARK } from '../helpers/hostile.js'
import { auth, catchAll, owner, ownerKeyId, ownSub, raw, received, refused } from '../helpers/security-deployment.js'
import { shipments } from '../helpers/security-deployment.js'

t.test(
  'CVE-2025-66415: an encoded dot pair (%2e%2e) in a proxied path is 400 bad_path and reaches no upstream',
  async (t) => {
    await refused(t, 'GET', '/v1/shipments/%2e%2e/admin', [], 400, 'bad_path')
  },
)

t.test(
  'CVE-2025-66415: an encoded slash (%2f) in a proxied path is 400 bad_path and reaches no upstream',
  async (t) => {
    await refused(t, 'GET', '/v1/shipments/x%2F..%2F..%2Fadmin', [auth(owner.apiKey)], 400, 'bad_path')
  },
)

t.test('prefix escape: /v1/shipments/../admin is 400 bad_path, never normalised into another route', async (t) => {
  await refused(t, 'GET', '/v1/shipments/../admin', [auth(owner.apiKey)], 400, 'bad_path')
})

t.test('prefix escape: /v1/shipments%2f..%2fadmin is 400 bad_path', async (t) => {
  await refused(t, 'GET', '/v1/shipments%2f..%2fadmin', [auth(owner.apiKey)], 400, 'bad_path')
})

// Judged as an upstream that decodes again will read them: once and twice decoded, and `;` or `#`
// spelled as %3b or %23. Management paths too.
for (const target of [
  '/v1/shipments/%252e%252e/admin',
  '/v1/shipments/%25252e%25252e/admin',
  '/v1/shipments%252f..%252fadmin',
  '/v1/shipments%252F%252e%252e%252Fadmin',
  '/v1/x%255c..',
  '/v1/orders%3bjsessionid=1',
  '/v1/orders%3B',
  '/v1/orders%253b',
  '/v1/orders%23x',
  '/v1/sub-accounts%3b/x',
  '/v1/sub-accounts/%252e%252e',
]) {
  t.test(`a path an upstream reads as traversal or parameters (${target}) is 400 bad_path`, async (t) => {
    await refused(t, 'GET', target, [auth(owner.apiKey)], 400, 'bad_path')
  })
}

t.test('prefix escape: /v1/shipmentsX does not match the /v1/shipments route (whole segments only)', async (t) => {
  // The owner's key lacks tracking:read: the /v1/shipments route would refuse it (403).
  const { marker, exchange } = raw('GET', '/v1/shipmentsX', [auth(owner.apiKey), ['Connection', 'close']])
  const res = (await exchange).responses[0]
  t.equal(res?.header(UPSTREAM_MARK), 'catch-all', 'the catch-all answered, not the scoped route')
  t.equal(shipments.byMarker(marker).length, 0, 'the /v1/shipments upstream received nothing')
})

t.test(
  'prefix escape: a percent-encoded letter (/v1/%73hipments) still takes the /v1/shipments route and its scopes',
  async (t) => {
    await refused(t, 'GET', '/v1/%73hipments/1', [auth(owner.apiKey)], 403, 'insufficient_scope')
  },
)

for (const target of [
  '/v1/x%00.json',
  '/v1/x%0a',
  '/v1/x%0D%0ASet-Cookie:%20a=b',
  '/v1/x%09',
  '/v1/x%1F',
  '/v1/x%7f',
]) {
  t.test(`a control character, percent-encoded (${target}), is 400 bad_path and reaches no upstream`, async (t) => {
    await refused(t, 'GET', target, [auth(owner.apiKey)], 400, 'bad_path')
  })
}

// A folding upstream (case, trailing dots and spaces) would serve these as /v1/shipments, whose
// scopes the owner's key lacks; the router would give them to the catch-all.
for (const target of [
  '/v1/Shipments/x',
  '/V1/shipments/x',
  '/v1/SHIPMENTS',
  '/v1/shipments./x',
  '/v1/shipments%20/x',
  '/v1/shipments%2e/x',
  '/v1/shipments.%20',
  // Letters that Unicode case folding or compatibility mapping reads as ASCII: long s, dotless i,
  // fullwidth s; and a double encoding.
  '/v1/%C5%BFhipments/x',
  '/v1/sh%C4%B1pments/x',
  '/v1/%EF%BD%93hipments/x',
  '/v1/%2573hipments/x',
  // Unicode spaces and default-ignorable code points at a segment's end, which trimming upstreams
  // drop: Ogham space mark, line separator, BOM, next line, soft hyphen, Mongolian vowel separator,
  // zero-width space, word joiner.
  '/v1/shipments%E1%9A%80/x',
  '/v1/shipments%E2%80%A8',
  '/v1/shipments%EF%BB%BF/x',
  '/v1/shipments%C2%85/x',
  '/v1/shipments%C2%AD',
  '/v1/shipments%E1%A0%8E/x',
  '/v1/shipments%E2%80%8B/x',
  '/v1/shipments%E2%81%A0%20./x',
  '/v1%E3%80%80/shipments/x',
]) {
  t.test(`prefix shadow: ${target} is 404 route_not_found, never the catch-all`, async (t) => {
    await refused(t, 'GET', target, [auth(owner.apiKey)], 404, 'route_not_found')
    await refused(t, 'POST', target, [auth(owner.apiKey), ['X-Service-Acting-Tenant', 'self']], 404, 'route_not_found')
  })
}

t.test('prefix shadow: /v1/shipmentsx/y is another path, and still goes to the catch-all', async (t) => {
  const { marker, exchange } = raw('GET', '/v1/shipmentsx/y', [auth(owner.apiKey), ['Connection', 'close']])
  const res = (await exchange).responses[0]
  t.equal(res?.status, 200)
  t.equal(res?.header(UPSTREAM_MARK), 'catch-all', 'the catch-all answered')
  t.equal(catchAll.byMarker(marker).length, 1, 'the catch-all received it')
})

for (const target of [
  '/v1/sub-accounts./x',
  '/v1/sub-accounts%20',
  '/v1/Sub-Accounts%2e/x',
  '/healthz.',
  '/docs%20/x',
  '/v1/%C5%BFub-accounts',
  '/doc%C5%BF',
]) {
  t.test(
    `prefix shadow: a spelling of a reserved path (${target}) is 404 route_not_found, never proxied`,
    async (t) => {
      await refused(t, 'GET', target, [auth(owner.apiKey)], 404, 'route_not_found')
      await refused(
        t,
        'DELETE',
        target,
        [auth(owner.apiKey), ['X-Service-Acting-Tenant', 'self']],
        404,
        'route_not_found',
      )
    },
  )
}

t.test(
  'an over-long id (5,000 characters) on every management route with one is 404 not_found, never proxied',
  async (t) => {
    const long = 'a'.repeat(5_000)
    const key = 'b'.repeat(5_000)
    const json = (value: unknown): [HeaderLines, string] => {
      const body = JSON.stringify(value)
      return [
        [
          ['Content-Type', 'application/json'],
          ['Content-Length', String(Buffer.byteLength(body))],
        ],
        body,
      ]
    }
    const none: [HeaderLines, string | undefined] = [[['Content-Length', '0']], undefined]
    for (const [method, target, [headers, body]] of [
      ['GET', `/v1/sub-accounts/${long}`, [[], undefined]],
      ['PATCH', `/v1/sub-accounts/${long}`, json({ name: 'x' })],
      ['POST', `/v1/sub-accounts/${long}/deactivate`, none],
      ['POST', `/v1/sub-accounts/${long}/reactivate`, none],
      ['GET', `/v1/sub-accounts/${long}/api-keys`, [[], undefined]],
      ['POST', `/v1/sub-accounts/${long}/api-keys`, json({ name: 'k', scopes: ['tracking:read'] })],
      ['POST', `/v1/sub-accounts/${long}/api-keys/${ownerKeyId}/revoke`, none],
      ['POST', `/v1/sub-accounts/${ownSub.id}/api-keys/${key}/revoke`, none],
    ] as const) {
      const { marker, exchange } = raw(
        method,
        target,
        [auth(owner.apiKey), ['X-Service-Acting-Tenant', 'self'], ...headers],
        body === undefined ? {} : { body },
      )
      const res = (await exchange).responses[0]
      const what = `${method} ${target.replace(/([ab])\1{4999}/, '<5,000 × $1>')}`
      t.ok(res, `${what}: answered`)
      if (res === undefined) continue
      t.equal(problemIssue(res, { status: 404, code: 'not_found', requestId: marker }), null, `${what}: 404 not_found`)
      t.equal(received(marker), 0, `${what}: no upstream received it`)
    }
  },
)

t.test(
  'prefix escape: a fragment cannot carry a management path to an upstream (DELETE /v1/sub-accounts#x)',
  async (t) => {
    // Routing ignores a fragment; the reserved-path check must not see another path (400 bad_path).
    const { marker, exchange } = raw('DELETE', '/v1/sub-accounts#x', [
      auth(owner.apiKey),
      ['X-Service-Acting-Tenant', 'self'],
      ['Content-Length', '0'],
      ['Connection', 'close'],
    ])
    const res = (await exchange).responses[0]
    t.equal(
      received(marker),
      0,
      `no upstream received it (answered ${res?.status} ${res?.body.slice(0, 100)}; upstream got ${
        catchAll
          .byMarker(marker)
          .map((r) => `${r.method} ${r.url}`)
          .join(', ') || 'nothing'
      })`,
    )
  },
)

t.test('prefix escape: a fragment cannot carry an ops path to an upstream (POST /healthz#x)', async (t) => {
  // The same, for an ops path.
  const { marker, exchange } = raw('POST', '/healthz#x', [
    auth(owner.apiKey),
    ['X-Service-Acting-Tenant', 'self'],
    ['Content-Length', '0'],
    ['Connection', 'close'],
  ])
  const res = (await exchange).responses[0]
  t.equal(
    received(marker),
    0,
    `no upstream received it (answered ${res?.status}; upstream got ${
      catchAll
        .byMarker(marker)
        .map((r) => `${r.method} ${r.url}`)
        .join(', ') || 'nothing'
    })`,
  )
})
