// The security matrix: one case per line, each named after the guarantee it holds the gateway to.
// Other files prove much of this more broadly (proxy-headers, proxy-routing, security, replicas);
// here each attack has its own line, so that a regression names the attack it lets through.
// This file: trusted headers, keys and acting on one's own, upgrades, the response's headers, a
// revoke seen by the other replica, and brute force.
// The deployment and the shared tools: test/helpers/security-deployment.ts.
import t from 'tap'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'
import { recentAdmissions } from '../helpers/gateway.js'
import { type HeaderLines, nextMarker, problemIssue, rawExchange, requestBytes } from '../helpers/hostile.js'
import { a, afterRepeatedInvalidations, auth, b, catchAll, flood, foreignSub } from '../helpers/security-deployment.js'
import { foreignSubKey, manage, owner, ownerKeyId, ownSub, portA } from '../helpers/security-deployment.js'
import { randomWellFormedKey, raw, received, refused, shipments, storeLookups } from '../helpers/security-deployment.js'

t.test('GHSA-gwhp-pf74-vj37: a Connection header naming the trusted headers cannot remove them', async (t) => {
  const { marker, exchange } = raw('GET', '/orders/1', [
    auth(owner.apiKey),
    ['X-Service-Acting-Tenant', 'ext:acme-eu'],
    [
      'Connection',
      'close, X-Service-Resolved-Tenant, X-Service-Caller-Tenant, X-Service-Key-Id, X-Service-Scopes, X-Request-Id',
    ],
  ])
  t.equal((await exchange).responses[0]?.status, 200, 'proxied')
  const got = catchAll.byMarker(marker)[0]
  t.same(
    [
      got?.headers['x-service-resolved-tenant'],
      got?.headers['x-service-caller-tenant'],
      got?.headers['x-service-key-id'],
      got?.headers['x-service-scopes'],
      got?.headers['x-request-id'],
    ],
    [ownSub.id, owner.id, ownerKeyId, 'sub_accounts:read sub_accounts:write', marker],
    "the upstream received all five trusted headers, with the gateway's values",
  )
})

t.test('websocket: an upgrade without a key is 401 and never reaches the upstream', async (t) => {
  await refused(
    t,
    'GET',
    '/socket',
    [
      ['Upgrade', 'websocket'],
      ['Connection', 'Upgrade'],
      ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
      ['Sec-WebSocket-Version', '13'],
    ],
    401,
    'unauthenticated',
  )
})

t.test('websocket: an upgrade with an invalid key is 401 and never reaches the upstream', async (t) => {
  const badChecksum = owner.apiKey.slice(0, -1) + (owner.apiKey.endsWith('a') ? 'b' : 'a')
  await refused(
    t,
    'GET',
    '/socket',
    [
      auth(badChecksum),
      ['Upgrade', 'websocket'],
      ['Connection', 'Upgrade'],
      ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
      ['Sec-WebSocket-Version', '13'],
    ],
    401,
    'unauthenticated',
  )
})

t.test(
  'websocket: an upgrade with a valid key is not proxied as an upgrade (no 101, no Upgrade upstream)',
  async (t) => {
    const { marker, exchange } = raw('GET', '/socket', [
      auth(owner.apiKey),
      ['Upgrade', 'websocket'],
      ['Connection', 'Upgrade'],
      ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
      ['Sec-WebSocket-Version', '13'],
    ])
    const res = (await exchange).responses[0]
    t.not(res?.status, 101, `no switch of protocols (${res?.status})`)
    const got = catchAll.byMarker(marker)[0]
    t.equal(got?.headers.upgrade, undefined, 'the upstream received no Upgrade header')
  },
)

t.test(
  "acting as another parent's sub-account is 403 acting_tenant_forbidden, the same answer as an unknown one",
  async (t) => {
    const answers: Record<string, unknown>[] = []
    for (const acting of [
      foreignSub.id,
      'ext:foreign-only',
      '00000000-0000-4000-8000-000000000000',
      'ext:nobody-at-all',
    ]) {
      const { marker, exchange } = raw('GET', '/orders', [
        auth(owner.apiKey),
        ['X-Service-Acting-Tenant', acting],
        ['Connection', 'close'],
      ])
      const res = (await exchange).responses[0]!
      t.equal(
        problemIssue(res, { status: 403, code: 'acting_tenant_forbidden', requestId: marker }),
        null,
        `${acting}: 403 acting_tenant_forbidden`,
      )
      t.equal(received(marker), 0, `${acting}: no upstream received it`)
      const { request_id: _id, ...rest } = res.json()
      answers.push(rest)
    }
    t.same(
      new Set(answers.map((answer) => JSON.stringify(answer))).size,
      1,
      'one and the same answer for foreign and unknown targets',
    )
  },
)

t.test("a sub-account key of another parent cannot act as this parent's sub-account", async (t) => {
  await refused(
    t,
    'GET',
    '/orders',
    [auth(foreignSubKey.api_key), ['X-Service-Acting-Tenant', ownSub.id]],
    403,
    'acting_tenant_forbidden',
  )
})

t.test('two Authorization headers are refused even when the second comes after 2,000 other headers', async (t) => {
  // Node keeps only the first server.maxHeadersCount headers: a second Authorization past them
  // would go unseen. The header limits refuse such a request (431) before any check reads them.
  // (The marker goes in the path, where no header count can push it out.)
  const padding: HeaderLines = Array.from({ length: 2000 }, (_, i) => [`X-P${i}`, 'v'])
  const marker = nextMarker('cut')
  const bytes = requestBytes({
    method: 'GET',
    target: `/orders/${marker}`,
    headers: [
      ['Host', 'x'],
      auth(owner.apiKey),
      ...padding,
      ['Authorization', 'Bearer tgw_second'],
      ['Connection', 'close'],
    ],
  })
  const res = (await rawExchange(portA, bytes, { until: 1 })).responses[0]
  t.ok(
    res !== undefined && res.status >= 400 && res.status < 500,
    `refused (got ${res?.status} ${res?.body.slice(0, 100)})`,
  )
  t.equal(catchAll.received.filter((r) => r.url.includes(marker)).length, 0, 'no upstream received it')
})

t.test(
  "hop-by-hop headers of the upstream's response (Keep-Alive, and those its Connection names) do not reach the client",
  async (t) => {
    // RFC 9110 §7.6.1 asks a proxy to drop them, and every header its Connection names.
    const { exchange } = raw('GET', '/hop/1', [auth(owner.apiKey)])
    const res = (await exchange).responses[0]
    t.equal(res?.body, 'hop', 'proxied')
    t.equal(
      res?.header('x-upstream-hop'),
      undefined,
      `no header that the upstream's Connection named (${res?.header('x-upstream-hop')})`,
    )
    t.not(res?.header('keep-alive'), 'timeout=1, max=3', "no Keep-Alive of the upstream's")
    t.notMatch(
      res?.header('connection') ?? '',
      /x-upstream-hop/i,
      `no Connection of the upstream's (${res?.header('connection')})`,
    )
  },
)

t.test("the response names the gateway's request id, not the upstream's", async (t) => {
  // raw() sends the marker as the client's X-Request-Id, which the gateway keeps.
  const { marker, exchange } = raw('GET', '/hop/2', [auth(owner.apiKey)])
  const res = (await exchange).responses[0]
  t.equal(res?.body, 'hop', 'proxied')
  t.same(res?.headers['x-request-id'], [marker], 'one X-Request-Id: the one the gateway kept')
})

t.test("the client's Connection: close is honoured on a proxied response", async (t) => {
  // The upstream's `Connection: keep-alive` must not keep open a connection the client asked to
  // close (RFC 9112 §9.6).
  const { exchange } = raw('GET', '/orders/3', [auth(owner.apiKey), ['Connection', 'close']], {
    until: 2,
    waitMs: 2000,
  })
  const done = await exchange
  t.equal(done.responses[0]?.status, 200, 'proxied')
  t.ok(done.closedByServer, 'the gateway closed the connection after its response')
})

t.test('a revoked key still cached on replica B is refused by B within 1 s of the revoke through A', async (t) => {
  const redis = redisClient(t)
  const subscribed = await eventually(
    5000,
    async () => Number(((await redis.pubsub('NUMSUB', `${a.redisKeyPrefix}invalidate`)) as [string, number])[1]) >= 2,
  )
  t.not(subscribed, null, 'A and B listen on the invalidation channel')
  const key = await manage(a, owner.apiKey, 'POST', `/v1/sub-accounts/${ownSub.id}/api-keys`, {
    name: 'soon revoked',
    scopes: ['tracking:read'],
  })
  const onB = () => callAs(b.url, key.api_key, { path: '/orders/revoked' })
  // The creation's invalidation is sent again 1 s later: past that, only the revoke's own message
  // can make B refuse the key below.
  await afterRepeatedInvalidations()
  t.equal((await onB()).status, 200, 'B accepts the key')
  // Until B admits it from its memory of the last admissions (no lookup at all, the closest to
  // the request a revoke must reach). Any eviction on B clears that memory, and so does the end
  // of its one-second window: then the next request remembers it again.
  const fromMemory = await eventually(2000, async () => {
    const recent = await recentAdmissions(b)
    const status = (await onB()).status
    return status === 200 && (await recentAdmissions(b)) > recent
  })
  t.not(fromMemory, null, 'B accepts it again, from its memory of the last admissions')
  await manage(a, owner.apiKey, 'POST', `/v1/sub-accounts/${ownSub.id}/api-keys/${key.id}/revoke`)
  const took = await eventually(1000, async () => (await onB()).status === 401)
  t.not(took, null, `B refuses the revoked key within 1 s (${took} ms)`)
})

t.test(
  'brute force: 2,000 random well-formed keys are all 401, at most one Postgres lookup each, none for a repeat',
  async (t) => {
    // A fill that overlaps a cache invalidation is not stored (README "Caches"): wait until the
    // repeats of the invalidations sent by earlier changes (1 s after each) are over.
    await afterRepeatedInvalidations()
    const before = await storeLookups(a)
    const upstreamBefore = catchAll.received.length + shipments.received.length
    let repeatLookups = 0
    const statuses: number[] = []
    // In batches: each key once, then the same keys again at once, while their "not found" is cached.
    for (let batch = 0; batch < 20; batch++) {
      const keys = Array.from({ length: 100 }, randomWellFormedKey)
      statuses.push(...(await flood(keys)))
      const mid = await storeLookups(a)
      statuses.push(...(await flood(keys)))
      repeatLookups += (await storeLookups(a)).postgres - mid.postgres
    }
    const after = await storeLookups(a)
    t.equal(statuses.filter((s) => s === 401).length, 4000, 'every one of the 4,000 requests was 401')
    t.ok(
      after.postgres - before.postgres <= 2000,
      `Postgres was asked ${after.postgres - before.postgres} times for 2,000 distinct keys`,
    )
    t.equal(repeatLookups, 0, 'the repeats cost no Postgres lookup (negative cache)')
    t.equal(catchAll.received.length + shipments.received.length, upstreamBefore, 'no upstream received any of them')
  },
)

t.test('brute force: malformed and bad-checksum keys cost no store lookup at all', async (t) => {
  const keys = Array.from({ length: 2000 }, (_, i) => {
    const good = randomWellFormedKey()
    switch (i % 4) {
      case 0: // the checksum of another key
        return good.slice(0, -6) + randomWellFormedKey().slice(-6)
      case 1: // one character changed
        return good.slice(0, 10) + (good[10] === 'a' ? 'b' : 'a') + good.slice(11)
      case 2: // a client secret's shape, a valid checksum, but not a key
        return `tgws_${good.slice(4)}`
      default: // too short, too long, no key's shape (a foreign key's shape is looked up, paced: key-imports.test.ts)
        return ['tgw_', `${good}x`, good.slice(0, -1), `sk live ${good.slice(4)}`, good.toLowerCase()][i % 5]!
    }
  })
  const before = await storeLookups(a)
  const statuses = await flood(keys)
  const after = await storeLookups(a)
  t.equal(statuses.filter((s) => s === 401).length, 2000, 'every one was 401')
  t.equal(after.postgres - before.postgres, 0, 'no Postgres lookup')
  t.equal(after.redis - before.redis, 0, 'no Redis lookup')
  t.equal(after.localMisses - before.localMisses, 0, 'not even a look into the in-process cache')
})

t.test('method and URL overrides on a read-only key reach the upstream as a plain GET', async (t) => {
  const overrides: HeaderLines = [
    ['X-HTTP-Method-Override', 'DELETE'],
    ['X-HTTP-Method', 'DELETE'],
    ['X-Method-Override', 'DELETE'],
    ['X-Original-Method', 'DELETE'],
    ['X-Original-URL', '/admin/drop'],
    ['X-Rewrite-URL', '/admin/drop'],
    ['Forwarded', 'for=10.0.0.1;host=admin.internal'],
    ['X-Real-IP', '10.0.0.1'],
  ]
  const { marker, exchange } = raw('GET', '/v1/shipments/1', [auth(foreignSubKey.api_key), ...overrides])
  t.equal((await exchange).responses[0]?.status, 200, 'the read is allowed')
  const [got] = shipments.byMarker(marker)
  t.ok(got, 'the upstream got the read')
  t.equal(got?.method, 'GET')
  const arrived = overrides.map(([name]) => name.toLowerCase()).filter((name) => got?.headers[name] !== undefined)
  t.same(arrived, [], 'without any override, Forwarded or X-Real-IP')
})

t.test(
  "a lookalike X_Service_Resolved_Tenant naming another parent's sub-account never reaches the upstream",
  async (t) => {
    const { marker, exchange } = raw('GET', '/orders/lookalike', [
      auth(owner.apiKey),
      ['X_Service_Resolved_Tenant', foreignSub.id],
      ['x.service.resolved.tenant', foreignSub.id],
      ['x-service_resolved-tenant', foreignSub.id],
    ])
    t.equal((await exchange).responses[0]?.status, 200)
    const [got] = catchAll.byMarker(marker)
    const names: string[] = []
    for (let i = 0; i < (got?.rawHeaders.length ?? 0); i += 2) names.push(got!.rawHeaders[i]!.toLowerCase())
    t.same(
      names.filter((name) => name.replace(/[_.]/g, '-') === 'x-service-resolved-tenant'),
      ['x-service-resolved-tenant'],
      'one resolved-tenant header, spelled as the gateway spells it',
    )
    t.equal(got?.headers['x-service-resolved-tenant'], owner.id, "naming the caller's own tenant")
  },
)
