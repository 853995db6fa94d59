// Usage metering and the usage report (docs/api.md, docs/internals.md) and keys' last_used_at,
// over real sockets, real Postgres and Redis and a real upstream. The meter's timer is an hour
// long, so that only an explicit flush writes: every count below is exact.
import t from 'tap'
import type { LightMyRequestResponse } from 'fastify'
import { generateApiKey } from '../../src/auth/key-format.js'
import { utcDay } from '../../src/usage/meter.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { problemOf } from '../helpers/problems.js'
import { REFUSED_URL, startUpstream } from '../helpers/upstream.js'

/** The units of usage with nothing forwarded (or written straight into usage_daily): no request units. */
const none = { requests: 0 }

const HOUR = 3_600_000

/** problemOf (the envelope of docs/api.md) for a response read off a socket. */
function problem(res: RawResponse) {
  return problemOf({
    statusCode: res.status,
    headers: res.headers,
    body: res.body,
    json: () => res.json(),
  } as unknown as LightMyRequestResponse)
}

const CLASS_NAMES = { 2: '2xx', 3: '3xx', 4: '4xx', 5: '5xx' } as const

t.test('usage', async (t) => {
  // The upstream answers /…/status/NNN with NNN, anything else with 200.
  const upstream = await startUpstream(t, (request, response) => {
    const match = /\/status\/(\d{3})$/.exec(request.url!.split('?')[0]!)
    const status = match ? Number(match[1]) : 200
    const headers: Record<string, string> = { 'content-type': 'application/json' }
    if (status >= 300 && status < 400) headers.location = '/elsewhere'
    response.writeHead(status, headers)
    response.end(status === 204 || status === 304 ? undefined : JSON.stringify({ status }))
  })
  const gw = await startGateway(t, {
    upstreamUrl: upstream.url,
    usageFlushIntervalMs: HOUR,
    gatewayConfig: {
      routes: [
        { prefix: '/public', upstream: upstream.url, public: true },
        { prefix: '/scoped', upstream: upstream.url, scopes: { read: ['tracking:read'], write: ['tracking:write'] } },
        { prefix: '/dead', upstream: REFUSED_URL },
      ],
    },
  })
  const sql = gw.database.sql
  const flush = () => gw.app.usageMeter.flush()
  // Each call names the gateway's Host itself (an HTTP/1.1 request without one is a 400).
  const host = new URL(gw.url).host
  const call = (key: string | null, options: Parameters<typeof callAs>[2]) =>
    callAs(gw.url, key, { ...options, headers: [['Host', host], ...(options.headers ?? [])] })

  // Management calls go through the same gateway; its successes are not usage.
  async function createSub(parentKey: string, name: string, externalId?: string): Promise<{ id: string }> {
    const res = await call(parentKey, {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      json: { name, ...(externalId ? { external_id: externalId } : {}) },
    })
    if (res.status !== 201) throw new Error(`create sub-account: ${res.status} ${res.body}`)
    return res.json()
  }
  async function mintFor(parentKey: string, subId: string, scopes: string[]): Promise<{ id: string; api_key: string }> {
    const res = await call(parentKey, {
      method: 'POST',
      path: `/v1/sub-accounts/${subId}/api-keys`,
      acting: 'self',
      json: { name: 'k', scopes },
    })
    if (res.status !== 201) throw new Error(`mint key: ${res.status} ${res.body}`)
    return res.json()
  }

  const P = await gw.createParent()
  const A = await createSub(P.apiKey, 'A', 'a')
  const B = await createSub(P.apiKey, 'B', 'b')
  const C = await createSub(P.apiKey, 'C (never used)', 'c')
  const D = await createSub(P.apiKey, 'D (deactivated)', 'd')
  const bKey = await mintFor(P.apiKey, B.id, ['tracking:read'])
  const dKey = await mintFor(P.apiKey, D.id, ['tracking:read'])
  const deactivated = await call(P.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${D.id}/deactivate`,
    acting: 'self',
    body: '',
  })
  if (deactivated.status !== 200) throw new Error(`deactivate: ${deactivated.status} ${deactivated.body}`)
  const Q = await gw.createParent()
  const QA = await createSub(Q.apiKey, 'QA', 'a')

  const names = new Map<string, string>([
    [P.id, 'P'],
    [A.id, 'A'],
    [B.id, 'B'],
    [C.id, 'C'],
    [D.id, 'D'],
    [Q.id, 'Q'],
    [QA.id, 'QA'],
  ])

  /** Requests in usage_daily per tenant and status class, over every day, as "A 4xx" → n. */
  async function totals(): Promise<Map<string, number>> {
    const rows = await sql<{ tenant_id: string; status_class: number; n: number }[]>`
      select tenant_id, status_class, sum(requests)::int as n from usage_daily group by tenant_id, status_class`
    return new Map(
      rows.map((r) => [
        `${names.get(r.tenant_id) ?? r.tenant_id} ${CLASS_NAMES[r.status_class as 2 | 3 | 4 | 5]}`,
        r.n,
      ]),
    )
  }
  function delta(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
    const out: Record<string, number> = {}
    for (const key of new Set([...before.keys(), ...after.keys()])) {
      const d = (after.get(key) ?? 0) - (before.get(key) ?? 0)
      if (d !== 0) out[key] = d
    }
    return out
  }
  const snapshot = () =>
    sql`select tenant_id, day::text as day, status_class, requests::text as requests from usage_daily order by 1, 2, 3`

  t.test('management successes are not usage', async (t) => {
    await flush()
    t.same(Object.fromEntries(await totals()), {}, 'creating, minting and deactivating counted nothing')
  })

  t.test('N proxied requests are exactly N in usage_daily and in the report', async (t) => {
    const today = utcDay(Date.now())
    const receivedBefore = upstream.received.length
    // 37 acting as A (by UUID and by ext:), from the parent's key.
    const asA: [string, string, number][] = [
      ...Array.from({ length: 20 }, (_, i): [string, string, number] => ['GET', `/v1/things/${i}`, 200]),
      ...Array.from({ length: 5 }, (): [string, string, number] => ['POST', '/v1/orders/status/201', 201]),
      ...Array.from({ length: 2 }, (): [string, string, number] => ['DELETE', '/v1/orders/1/status/204', 204]),
      ...Array.from({ length: 3 }, (): [string, string, number] => ['GET', '/v1/moved/status/302', 302]),
      ...Array.from({ length: 4 }, (): [string, string, number] => ['GET', '/v1/missing/status/404', 404]),
      ...Array.from({ length: 3 }, (): [string, string, number] => ['GET', '/v1/broken/status/500', 500]),
    ]
    // 23 as B, with B's own key (no acting header).
    const asB: [string, string, number][] = [
      ...Array.from({ length: 15 }, (_, i): [string, string, number] => ['GET', `/v1/things/b${i}`, 200]),
      ...Array.from({ length: 4 }, (): [string, string, number] => ['POST', '/v1/orders/status/201', 201]),
      ...Array.from({ length: 2 }, (): [string, string, number] => ['GET', '/v1/missing/status/404', 404]),
      ...Array.from({ length: 2 }, (): [string, string, number] => ['PUT', '/v1/busy/status/503', 503]),
    ]
    t.equal(asA.length, 37)
    t.equal(asB.length, 23)
    const before = await totals()
    const results = await Promise.all([
      ...asA.map(([method, path], i) =>
        call(P.apiKey, {
          method,
          path,
          acting: i % 2 === 0 ? A.id : 'ext:a',
          ...(method === 'GET' ? {} : { json: { i } }),
        }),
      ),
      ...asB.map(([method, path], i) =>
        call(bKey.api_key, { method, path, ...(method === 'GET' ? {} : { json: { i } }) }),
      ),
    ])
    const expectedStatuses = [...asA, ...asB].map(([, , status]) => status)
    t.same(
      results.map((res) => res.status),
      expectedStatuses,
      'every request got the upstream status',
    )
    t.equal(upstream.received.length - receivedBefore, 60, 'each reached the upstream once (no retries)')

    t.same(delta(before, await totals()), {}, 'nothing is written before a flush')
    await flush()
    t.same(
      delta(before, await totals()),
      { 'A 2xx': 27, 'A 3xx': 3, 'A 4xx': 4, 'A 5xx': 3, 'B 2xx': 19, 'B 4xx': 2, 'B 5xx': 2 },
      'exact counts per tenant and status class; nothing for the parent whose key was used',
    )
    const days = await sql<
      { day: string }[]
    >`select distinct day::text as day from usage_daily where tenant_id in (${A.id}, ${B.id})`
    t.same(
      days.map((d) => d.day),
      [today],
      "all on today's UTC date",
    )

    const report = await call(P.apiKey, { path: '/v1/sub-accounts/usage' })
    t.equal(report.status, 200, report.body)
    const body = report.json()
    t.equal(body.to, today, 'to defaults to today')
    t.equal(body.from, `${today.slice(0, 8)}01`, 'from defaults to the first of the month')
    t.same(body.data, [
      {
        sub_account_id: A.id,
        external_id: 'a',
        requests: 37,
        by_status: { '2xx': 27, '3xx': 3, '4xx': 4, '5xx': 3 },
        days: [{ date: today, requests: 37, units: { requests: 37 } }],
        limited: { rate: 0, quota: 0 },
        units: { requests: 37 },
      },
      {
        sub_account_id: B.id,
        external_id: 'b',
        requests: 23,
        by_status: { '2xx': 19, '3xx': 0, '4xx': 2, '5xx': 2 },
        days: [{ date: today, requests: 23, units: { requests: 23 } }],
        limited: { rate: 0, quota: 0 },
        units: { requests: 23 },
      },
    ])
    t.equal(body.next_cursor, null)
  })

  t.test('a flush with nothing new changes nothing; two flushes add up', async (t) => {
    const rows = await snapshot()
    await flush()
    t.same(await snapshot(), rows, 'an empty flush writes nothing')
    await flush()
    t.same(await snapshot(), rows, 'nor does another')

    const before = await totals()
    for (let i = 0; i < 5; i++) t.equal((await call(P.apiKey, { path: `/v1/more/${i}`, acting: A.id })).status, 200)
    for (let i = 0; i < 2; i++)
      t.equal((await call(P.apiKey, { path: '/v1/x/status/404', acting: 'ext:a' })).status, 404)
    await flush()
    const middle = await totals()
    t.same(delta(before, middle), { 'A 2xx': 5, 'A 4xx': 2 })
    t.equal((await call(P.apiKey, { path: '/v1/again', acting: A.id })).status, 200)
    await flush()
    t.same(delta(before, await totals()), { 'A 2xx': 6, 'A 4xx': 2 }, 'the second flush adds to the first')
    const aToday = await sql<{ status_class: number; requests: string }[]>`
      select status_class, requests::text as requests from usage_daily where tenant_id = ${A.id} order by status_class`
    t.same(
      aToday.map((r) => [r.status_class, Number(r.requests)]),
      [
        [2, 33],
        [3, 3],
        [4, 6],
        [5, 3],
      ],
      'one row per day and class, added to',
    )
  })

  t.test('refusals after authentication count; 401s and public routes do not', async (t) => {
    const before = await totals()
    const revokedKey = await mintFor(P.apiKey, B.id, ['tracking:read'])
    const revoke = await call(P.apiKey, {
      method: 'POST',
      path: `/v1/sub-accounts/${B.id}/api-keys/${revokedKey.id}/revoke`,
      acting: 'self',
      body: '',
    })
    t.equal(revoke.status, 200)
    const expect = async (res: Promise<RawResponse>, status: number, code: string | null, what: string) => {
      const r = await res
      t.equal(r.status, status, `${what}: ${status}`)
      if (code !== null) t.equal(problem(r).code, code, `${what}: ${code}`)
    }

    // Refused before the acting tenant is resolved: the key's own tenant.
    await expect(
      call(P.apiKey, { path: '/v1/x', acting: '00000000-0000-4000-8000-000000000000' }),
      403,
      'acting_tenant_forbidden',
      'parent acting as an unknown id',
    )
    await expect(
      call(P.apiKey, { path: '/v1/x', acting: 'ext:nobody' }),
      403,
      'acting_tenant_forbidden',
      'parent acting as an unknown ext:',
    )
    await expect(
      call(P.apiKey, { path: '/v1/x', acting: QA.id }),
      403,
      'acting_tenant_forbidden',
      "parent acting as another parent's sub-account",
    )
    await expect(
      call(P.apiKey, { path: '/v1/x', acting: D.id }),
      403,
      'acting_tenant_deactivated',
      'parent acting as its deactivated sub-account',
    )
    await expect(
      call(P.apiKey, { path: '/v1/x', acting: 'SELF' }),
      400,
      'acting_tenant_malformed',
      'a malformed acting header',
    )
    await expect(
      call(P.apiKey, { method: 'POST', path: '/v1/x', json: {} }),
      400,
      'acting_tenant_required',
      'a write without the header',
    )
    await expect(call(dKey.api_key, { path: '/v1/x' }), 403, 'tenant_deactivated', 'a key of a deactivated sub-account')
    await expect(
      call(dKey.api_key, { path: '/v1/x', acting: A.id }),
      403,
      'tenant_deactivated',
      'a deactivated sub-account key acting as a sibling',
    )
    await expect(
      call(bKey.api_key, { path: '/v1/x', acting: A.id }),
      403,
      'acting_tenant_forbidden',
      'a sub-account key acting as a sibling',
    )
    await expect(
      call(bKey.api_key, { path: '/v1/sub-accounts' }),
      403,
      'parent_key_required',
      'a sub-account key on the management API',
    )
    // Refused after the acting tenant is resolved: the tenant acted as.
    await expect(
      call(bKey.api_key, { method: 'POST', path: '/scoped/x', json: {} }),
      403,
      'insufficient_scope',
      'B writing without tracking:write',
    )
    await expect(call(bKey.api_key, { path: '/scoped/x' }), 200, null, 'B reading with tracking:read')
    await expect(
      call(P.apiKey, { path: '/scoped/x', acting: A.id }),
      403,
      'insufficient_scope',
      'the parent acting as A without tracking:read',
    )
    await expect(
      call(P.apiKey, { path: '/dead/x', acting: A.id }),
      502,
      'upstream_unavailable',
      'an unreachable upstream, acting as A',
    )

    // The parent acting as itself, by default or by `self`: the parent.
    await expect(call(P.apiKey, { path: '/v1/own' }), 200, null, 'the parent, no acting header')
    await expect(call(P.apiKey, { path: '/v1/own/status/404', acting: 'self' }), 404, null, 'the parent acting as self')

    // Never authenticated: counted for nobody.
    await expect(call(null, { path: '/v1/x' }), 401, 'unauthenticated', 'no key')
    await expect(call(null, { path: '/v1/x', acting: A.id }), 401, 'unauthenticated', 'no key, acting as A')
    await expect(call('tgw_not-a-key', { path: '/v1/x', acting: A.id }), 401, 'unauthenticated', 'a malformed key')
    await expect(
      call(generateApiKey().apiKey, { path: '/v1/x', acting: A.id }),
      401,
      'unauthenticated',
      'an unknown key',
    )
    await expect(call(revokedKey.api_key, { path: '/v1/x' }), 401, 'unauthenticated', "a revoked key of B's")
    await expect(call(null, { path: '/v1/sub-accounts/usage' }), 401, 'unauthenticated', 'no key on the management API')
    // Refused before authentication: counted for nobody.
    await expect(
      call(P.apiKey, { path: '/v1/a/../x', acting: A.id }),
      400,
      'bad_path',
      'a bad path, even with a valid key',
    )
    // A public route needs no key and is not metered, whether or not one is sent.
    await expect(call(null, { path: '/public/x' }), 200, null, 'public, no key')
    await expect(call(P.apiKey, { path: '/public/x', acting: A.id }), 200, null, "public, with the parent's key")
    await expect(call(bKey.api_key, { path: '/public/status/404' }), 404, null, "public answered 404, with B's key")
    await expect(call(generateApiKey().apiKey, { path: '/public/x' }), 200, null, 'public, with an unknown key')

    await flush()
    t.same(
      delta(before, await totals()),
      { 'P 2xx': 1, 'P 4xx': 7, 'D 4xx': 2, 'B 2xx': 1, 'B 4xx': 3, 'A 4xx': 1, 'A 5xx': 1 },
      'each refusal after authentication counted once, for the right tenant',
    )
  })

  t.test('the report', async (t) => {
    const today = utcDay(Date.now())
    // D (deactivated) has usage from its refused key; C has none; QA is another parent's.
    await sql`insert into usage_daily (tenant_id, day, status_class, requests) values (${QA.id}, ${today}, 2, 1000)`

    const own = await call(P.apiKey, { path: '/v1/sub-accounts/usage' })
    t.equal(own.status, 200)
    const data = own.json().data as { sub_account_id: string; requests: number; by_status: Record<string, number> }[]
    t.same(
      data.map((e) => names.get(e.sub_account_id)),
      ['A', 'B', 'D'],
      "the parent's sub-accounts with usage, oldest first: not C, not QA, not the parent",
    )
    t.same(
      data[2],
      {
        sub_account_id: D.id,
        external_id: 'd',
        requests: 2,
        by_status: { '2xx': 0, '3xx': 0, '4xx': 2, '5xx': 0 },
        days: [{ date: today, requests: 2, units: none }],
        limited: { rate: 0, quota: 0 },
        units: none,
      },
      'a deactivated sub-account with usage is listed',
    )
    for (const entry of data)
      t.equal(
        entry.requests,
        Object.values(entry.by_status).reduce((a, b) => a + b, 0),
        `${names.get(entry.sub_account_id)}: requests = sum of by_status`,
      )

    const theirs = await call(Q.apiKey, { path: '/v1/sub-accounts/usage' })
    t.equal(theirs.status, 200)
    t.same(
      theirs.json().data,
      [
        {
          sub_account_id: QA.id,
          external_id: 'a',
          requests: 1000,
          by_status: { '2xx': 1000, '3xx': 0, '4xx': 0, '5xx': 0 },
          days: [{ date: today, requests: 1000, units: none }],
          limited: { rate: 0, quota: 0 },
          units: none,
        },
      ],
      'the other parent sees only its own, even with the same external_id',
    )
  })

  t.test('the report: who may read it', async (t) => {
    const refused = async (key: string, acting: string | undefined, status: number, code: string, what: string) => {
      const res = await call(key, { path: '/v1/sub-accounts/usage', ...(acting === undefined ? {} : { acting }) })
      t.equal(res.status, status, what)
      t.equal(problem(res).code, code, what)
      t.notOk(res.body.includes(A.id), `${what}: no usage shown`)
    }
    await refused(bKey.api_key, undefined, 403, 'parent_key_required', 'a sub-account key')
    await refused(bKey.api_key, 'self', 403, 'parent_key_required', 'a sub-account key acting as itself')
    await refused(P.apiKey, A.id, 403, 'parent_key_required', 'the parent acting as a sub-account')
    await refused(dKey.api_key, undefined, 403, 'tenant_deactivated', 'a deactivated sub-account key')
    const writeOnly = await gw.createParent({ scopes: ['sub_accounts:write'] })
    await refused(writeOnly.apiKey, undefined, 403, 'insufficient_scope', 'a parent key without sub_accounts:read')
    const scopeless = await gw.createParent({ scopes: ['tracking:read'] })
    await refused(scopeless.apiKey, undefined, 403, 'insufficient_scope', 'a parent key with other scopes only')
    const writeRes = await call(writeOnly.apiKey, { path: '/v1/sub-accounts/usage' })
    t.match(
      String(writeRes.headers['www-authenticate']),
      /insufficient_scope.*sub_accounts:read/,
      'the challenge names the scope',
    )

    const readOnly = await gw.createParent({ scopes: ['sub_accounts:read'] })
    const res = await call(readOnly.apiKey, { path: '/v1/sub-accounts/usage', acting: 'self' })
    t.equal(res.status, 200, 'sub_accounts:read is enough')
    t.same(res.json().data, [], 'a parent without sub-accounts has no entries')
  })

  t.test('the report: ranges, days and paging over stored usage', async (t) => {
    const R = await gw.createParent()
    // Positions that cross a digit boundary (98 … 102, or 998 … 1002 past a sequence a copied
    // template had moved on): a text comparison would put 100 before 98.
    const last = (await sql<{ last: number }[]>`select coalesce(max(seq), 0)::int as last from tenants`)[0]!.last
    const start = 10 ** Math.max(2, Math.ceil(Math.log10(last + 3))) - 2
    t.ok(start > last, 'the restart below cannot collide with existing rows')
    await sql`alter table tenants alter column seq restart with ${sql.unsafe(String(start))}`
    const subs: { id: string }[] = []
    for (const name of ['R1', 'R2', 'R3', 'R4', 'R5']) {
      const sub = await createSub(R.apiKey, name, name.toLowerCase())
      names.set(sub.id, name)
      subs.push(sub)
    }
    const [R1, R2, , R4, R5] = subs as [{ id: string }, { id: string }, { id: string }, { id: string }, { id: string }]
    const rows: [string, string, number, number][] = [
      [R1.id, '2025-03-01', 2, 5],
      [R1.id, '2025-03-01', 4, 1],
      [R1.id, '2025-03-03', 2, 2],
      [R2.id, '2025-03-02', 5, 7],
      [R4.id, '2025-02-28', 2, 3],
      [R5.id, '2025-03-31', 3, 4],
      [R5.id, '2025-04-01', 2, 9],
      [R5.id, '2024-03-01', 2, 11],
    ]
    for (const [tenant, day, statusClass, requests] of rows) {
      await sql`insert into usage_daily (tenant_id, day, status_class, requests) values (${tenant}, ${day}, ${statusClass}, ${requests})`
    }
    const report = async (query: string) => {
      const res = await call(R.apiKey, { path: `/v1/sub-accounts/usage?${query}` })
      t.equal(res.status, 200, `${query}: ${res.body.slice(0, 300)}`)
      return res.json() as {
        from: string
        to: string
        data: {
          sub_account_id: string
          requests: number
          by_status: Record<string, number>
          days: { date: string; requests: number }[]
        }[]
        next_cursor: string | null
      }
    }
    const named = (body: { data: { sub_account_id: string }[] }) => body.data.map((e) => names.get(e.sub_account_id))

    const march = await report('from=2025-03-01&to=2025-03-31')
    t.equal(march.from, '2025-03-01')
    t.equal(march.to, '2025-03-31')
    t.same(named(march), ['R1', 'R2', 'R5'], 'R3 never used, R4 only outside the range')
    t.same(
      march.data[0],
      {
        sub_account_id: R1.id,
        external_id: 'r1',
        requests: 8,
        by_status: { '2xx': 7, '3xx': 0, '4xx': 1, '5xx': 0 },
        days: [
          { date: '2025-03-01', requests: 6, units: none },
          { date: '2025-03-03', requests: 2, units: none },
        ],
        limited: { rate: 0, quota: 0 },
        units: none,
      },
      'days in order, only those with usage, classes summed per day',
    )
    const lastDay = [{ date: '2025-03-31', requests: 4, units: none }]
    t.same(march.data[2]?.days, lastDay, 'the last day is inclusive; April is outside')
    t.equal(march.next_cursor, null)

    t.same(named(await report('from=2025-03-02&to=2025-03-02')), ['R2'], 'a one-day range')
    const edge = await report('from=2025-02-28&to=2025-03-01')
    t.same(named(edge), ['R1', 'R4'], 'the first day is inclusive')
    t.same(edge.data[0]?.days, [{ date: '2025-03-01', requests: 6, units: none }])
    t.same(named(await report('from=2025-01-01&to=2025-02-27')), [], 'a range without usage: no entries')

    const longest = await report('from=2024-03-01&to=2025-03-01')
    t.same([longest.from, longest.to], ['2024-03-01', '2025-03-01'], '366 days are allowed')
    t.same(named(longest), ['R1', 'R4', 'R5'])
    t.same(longest.data[2]?.days, [{ date: '2024-03-01', requests: 11, units: none }])

    // An RFC 3339 date-time is taken as its UTC date; an unencoded + arrives as a space.
    for (const from of ['2025-03-01T00:30:00%2B01:00', '2025-03-01T00:30:00+01:00', '2025-02-27T23:00:00-01:00']) {
      const body = await report(`from=${from}&to=2025-03-01T12:00:00Z`)
      t.same([body.from, body.to], ['2025-02-28', '2025-03-01'], `from=${from}`)
      t.same(named(body), ['R1', 'R4'])
    }

    // Paging: limit=1 walks every entry once, oldest first, and ends with a null cursor.
    for (const limit of [1, 2, 3]) {
      const seen: string[] = []
      let cursor: string | null = null
      let pages = 0
      do {
        const body: Awaited<ReturnType<typeof report>> = await report(
          `from=2025-02-01&to=2025-03-31&limit=${limit}${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`,
        )
        t.ok(body.data.length >= 1 && body.data.length <= limit, `limit=${limit}: a page holds 1 to ${limit} entries`)
        seen.push(...named(body).map(String))
        cursor = body.next_cursor
        pages++
      } while (cursor !== null && pages < 10)
      t.same(seen, ['R1', 'R2', 'R4', 'R5'], `limit=${limit}: every entry once, in order`)
      t.equal(pages, Math.ceil(4 / limit), `limit=${limit}: ${Math.ceil(4 / limit)} pages`)
    }
    const firstPage = await report('from=2025-03-01&to=2025-03-31&limit=1')
    t.type(firstPage.next_cursor, 'string')
    const secondPage = await report(
      `from=2025-03-01&to=2025-03-31&limit=1&cursor=${encodeURIComponent(firstPage.next_cursor!)}`,
    )
    t.same(named(secondPage), ['R2'], 'the cursor resumes after the entry it names')
    t.same(secondPage.data[0]?.days, [{ date: '2025-03-02', requests: 7, units: none }], 'a later page keeps the range')

    // The defaults: the first of the current month up to today.
    const today = utcDay(Date.now())
    const firstOfMonth = `${today.slice(0, 8)}01`
    const lastOfPreviousMonth = utcDay(Date.parse(firstOfMonth) - 86_400_000)
    const tomorrow = utcDay(Date.parse(today) + 86_400_000)
    for (const [day, requests] of [
      [firstOfMonth, 3],
      [today, 4],
      [lastOfPreviousMonth, 50],
      [tomorrow, 70],
    ] as const) {
      await sql`insert into usage_daily (tenant_id, day, status_class, requests) values (${R2.id}, ${day}, 2, ${requests})
        on conflict (tenant_id, day, status_class) do update set requests = usage_daily.requests + excluded.requests`
    }
    const current = await report('')
    t.same([current.from, current.to], [firstOfMonth, today])
    t.same(named(current), ['R2'])
    t.same(
      current.data[0]?.days,
      firstOfMonth === today
        ? [{ date: today, requests: 7, units: none }]
        : [
            { date: firstOfMonth, requests: 3, units: none },
            { date: today, requests: 4, units: none },
          ],
      'the current month so far: not the month before, not tomorrow',
    )
  })

  t.test('the report: granularity=day and sub_account_id', async (t) => {
    const D = await gw.createParent()
    const D1 = await createSub(D.apiKey, 'D1')
    const D2 = await createSub(D.apiKey, 'D2')
    const theirs = await createSub(P.apiKey, 'not D')
    // tenant, day, class, requests, limited rate, limited quota
    const rows: [string, string, number, number, number, number][] = [
      [D1.id, '2025-05-01', 2, 5, 0, 0],
      [D1.id, '2025-05-01', 4, 3, 2, 0],
      [D1.id, '2025-05-02', 5, 1, 0, 0],
      // A quota's refusal flushed before its answer: no request yet on that day.
      [D1.id, '2025-05-03', 4, 0, 0, 1],
      [D2.id, '2025-05-02', 3, 4, 0, 0],
      [D2.id, '2025-06-01', 2, 9, 0, 0],
      [theirs.id, '2025-05-01', 2, 6, 0, 0],
    ]
    for (const [tenant, day, statusClass, requests, rate, quota] of rows) {
      await sql`insert into usage_daily (tenant_id, day, status_class, requests, limited_rate, limited_quota)
        values (${tenant}, ${day}, ${statusClass}, ${requests}, ${rate}, ${quota})`
    }
    const report = async (query: string) => {
      const res = await call(D.apiKey, { path: `/v1/sub-accounts/usage?${query}` })
      t.equal(res.status, 200, `${query}: ${res.body.slice(0, 300)}`)
      return res.json()
    }
    const zero = { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 }
    const quiet = { rate: 0, quota: 0 }
    const byDay = await report('from=2025-05-01&to=2025-05-31&granularity=day')
    t.same(byDay.data, [
      {
        sub_account_id: D1.id,
        external_id: null,
        requests: 9,
        by_status: { '2xx': 5, '3xx': 0, '4xx': 3, '5xx': 1 },
        days: [
          {
            date: '2025-05-01',
            requests: 8,
            by_status: { ...zero, '2xx': 5, '4xx': 3 },
            limited: { rate: 2, quota: 0 },
            units: none,
          },
          { date: '2025-05-02', requests: 1, by_status: { ...zero, '5xx': 1 }, limited: quiet, units: none },
          { date: '2025-05-03', requests: 0, by_status: zero, limited: { rate: 0, quota: 1 }, units: none },
        ],
        limited: { rate: 2, quota: 1 },
        units: none,
      },
      {
        sub_account_id: D2.id,
        external_id: null,
        requests: 4,
        by_status: { ...zero, '3xx': 4 },
        days: [{ date: '2025-05-02', requests: 4, by_status: { ...zero, '3xx': 4 }, limited: quiet, units: none }],
        limited: { rate: 0, quota: 0 },
        units: none,
      },
    ])
    const byRange = await report('from=2025-05-01&to=2025-05-31')
    t.same(
      byRange.data.map((e: { days: unknown[] }) => e.days),
      [
        [
          { date: '2025-05-01', requests: 8, units: none },
          { date: '2025-05-02', requests: 1, units: none },
        ],
        [{ date: '2025-05-02', requests: 4, units: none }],
      ],
      'the default is as before: each day its total, days with requests only',
    )
    t.same(await report('from=2025-05-01&to=2025-05-31&granularity=range'), byRange, 'granularity=range is the default')

    const onlyD2 = await report(`from=2025-05-01&to=2025-06-30&granularity=day&sub_account_id=${D2.id}`)
    t.same(
      onlyD2.data.map((e: { sub_account_id: string; requests: number }) => [e.sub_account_id, e.requests]),
      [[D2.id, 13]],
      'sub_account_id: that sub-account only',
    )
    t.equal(onlyD2.next_cursor, null)
    const upper = await report(`from=2025-05-01&to=2025-05-31&sub_account_id=${D1.id.toUpperCase()}`)
    t.same(
      upper.data.map((e: { sub_account_id: string }) => e.sub_account_id),
      [D1.id],
      'an upper-case id is the same id',
    )
    t.same(
      (await report(`sub_account_id=${theirs.id}&from=2025-05-01&to=2025-05-31`)).data,
      [],
      "another parent's: nothing",
    )

    // Paging by day keeps each sub-account's days on its page.
    const first = await report('from=2025-05-01&to=2025-05-31&granularity=day&limit=1')
    t.same(first.data, byDay.data.slice(0, 1))
    const second = await report(
      `from=2025-05-01&to=2025-05-31&granularity=day&limit=1&cursor=${encodeURIComponent(first.next_cursor)}`,
    )
    t.same(second.data, byDay.data.slice(1))
    t.equal(second.next_cursor, null)

    for (const [query, path] of [
      ['granularity=week', '/querystring/granularity'],
      ['granularity=hour', '/querystring/granularity'],
      ['sub_account_id=nope', '/querystring/sub_account_id'],
      ['granularity=day&from=2025-01-01&to=2026-01-02', '/querystring/to'],
    ] as const) {
      const res = await call(D.apiKey, { path: `/v1/sub-accounts/usage?${query}` })
      t.equal(res.status, 400, query)
      const body = problem(res)
      t.equal(body.code, 'validation_failed', query)
      t.ok(
        body.errors?.some((e) => e.path === path),
        `${query} names ${path}: ${JSON.stringify(body.errors)}`,
      )
    }
  })

  t.test('the report: validation errors are 400 validation_failed', async (t) => {
    const cursorOf = (text: string) => Buffer.from(text).toString('base64url')
    const cases: [string, string][] = [
      ['from=2025-03-02&to=2025-03-01', '/querystring/from'],
      ['from=2025-01-01&to=2026-01-02', '/querystring/to'],
      ['from=2020-01-01', '/querystring/to'],
      ['from=2025-02-30', '/querystring/from'],
      ['to=2025-13-01', '/querystring/to'],
      ['from=yesterday', '/querystring/from'],
      ['from=%20', '/querystring/from'],
      ['to=2025-03-01T10:00:00', '/querystring/to'],
      // Its UTC date is 10000-01-01: a date the report cannot take (not a store error, a 500).
      ['from=9999-12-31&to=9999-12-31T23:00:00-02:00', '/querystring/to'],
      [`from=${'2'.repeat(65)}`, '/querystring/from'],
      ['cursor=nope', '/querystring/cursor'],
      [`cursor=${cursorOf('s:0')}`, '/querystring/cursor'],
      [`cursor=${cursorOf('s:abc')}`, '/querystring/cursor'],
      ['limit=0', '/querystring/limit'],
      ['limit=101', '/querystring/limit'],
      ['limit=two', '/querystring/limit'],
      ['foo=1', '/querystring/foo'],
      ['status=active', '/querystring/status'],
    ]
    for (const [query, path] of cases) {
      const res = await call(P.apiKey, { path: `/v1/sub-accounts/usage?${query}` })
      t.equal(res.status, 400, query)
      const body = problem(res)
      t.equal(body.code, 'validation_failed', query)
      t.ok(
        body.errors?.some((e) => e.path === path),
        `${query} names ${path}: ${JSON.stringify(body.errors)}`,
      )
    }
  })

  t.test('last_used_at', async (t) => {
    const key = await mintFor(P.apiKey, A.id, ['tracking:read'])
    const listed = async () => {
      const res = await call(P.apiKey, { path: `/v1/sub-accounts/${A.id}/api-keys` })
      t.equal(res.status, 200)
      return (res.json().data as { id: string; last_used_at: string | null }[]).find((k) => k.id === key.id)
    }
    const stored = async () =>
      (await sql<{ last_used_at: Date | null }[]>`select last_used_at from api_keys where id = ${key.id}`)[0]!
        .last_used_at

    t.equal((await listed())?.last_used_at, null, 'null before any use')
    await flush()
    t.equal(await stored(), null, 'a flush without use sets nothing')

    const beforeUse = Date.now()
    t.equal((await call(key.api_key, { path: '/v1/first' })).status, 200)
    t.equal(await stored(), null, 'nothing is written on the request path')
    await flush()
    const afterFlush = Date.now()
    const first = await stored()
    t.ok(first instanceof Date, 'set by the flush')
    t.ok(
      first!.getTime() >= beforeUse && first!.getTime() <= afterFlush,
      `the time of the use: ${first?.toISOString()}`,
    )
    t.equal((await listed())?.last_used_at, first!.toISOString(), 'shown in the key list')

    for (let i = 0; i < 3; i++) t.equal((await call(key.api_key, { path: `/v1/again/${i}` })).status, 200)
    t.equal((await call(key.api_key, { path: '/v1/x/status/404' })).status, 404)
    await flush()
    t.equal((await stored())?.toISOString(), first!.toISOString(), 'further uses within the minute do not rewrite it')
    t.equal((await listed())?.last_used_at, first!.toISOString())

    const other = await mintFor(P.apiKey, A.id, ['tracking:read'])
    const others = (await call(P.apiKey, { path: `/v1/sub-accounts/${A.id}/api-keys` })).json().data as {
      id: string
      last_used_at: string | null
    }[]
    t.equal(others.find((k) => k.id === other.id)?.last_used_at, null, "another key's stays null")
  })
})
