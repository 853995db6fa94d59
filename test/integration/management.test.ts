// The management API (docs/api.md): happy paths and validation, on a fresh real Postgres.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

t.test('management API', async (t) => {
  const gw = await startGateway(t, { listen: false, redis: false })
  const parent = await gw.createParent()
  // Each sub-test starts from a parent without active sub-accounts unless it creates its own.
  const freshParent = () => gw.createParent()
  const count = async (table: string) => Number((await gw.sql.unsafe(`select count(*)::int as n from ${table}`))[0]!.n)

  t.test('create', async (t) => {
    const p = await freshParent()
    const res = await gw.call(p.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      body: { name: '  Acme EU  ', external_id: 'acme-eu', metadata: { region: 'eu' } },
    })
    t.equal(res.statusCode, 201)
    const body = res.json()
    t.equal(res.headers.location, `/v1/sub-accounts/${body.id}`)
    t.match(body, {
      name: 'Acme EU',
      external_id: 'acme-eu',
      status: 'active',
      metadata: { region: 'eu' },
      deactivated_at: null,
    })
    t.same(body.limits, { rate: null, monthly_quota: null }, 'no limits unless given')
    t.match(body.id, /^[0-9a-f-]{36}$/)
    t.equal(body.created_at, body.updated_at)
    t.same(Object.keys(body).sort(), [
      'created_at',
      'deactivated_at',
      'effective_key_policy',
      'effective_limits',
      'external_id',
      'id',
      'key_policy',
      'limits',
      'metadata',
      'name',
      'placement',
      'plan_id',
      'status',
      'updated_at',
    ])

    const minimal = await gw.call(p.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      acting: 'self',
      body: { name: 'Bare' },
    })
    t.equal(minimal.statusCode, 201)
    t.match(minimal.json(), { external_id: null, metadata: {} })

    const nullExt = await gw.call(p.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      acting: 'self',
      body: { name: 'Null', external_id: null },
    })
    t.equal(nullExt.statusCode, 201)
    t.equal(nullExt.json().external_id, null)
  })

  t.test('create: invalid input is refused with the field and changes nothing', async (t) => {
    const p = await freshParent()
    const before = await count('tenants')
    const cases: [unknown, string][] = [
      [undefined, '/body'],
      [{}, '/body/name'],
      [{ name: '' }, '/body/name'],
      [{ name: '   ' }, '/body/name'],
      [{ name: 'x'.repeat(201) }, '/body/name'],
      [{ name: 42 }, '/body/name'],
      [{ name: ['a'] }, '/body/name'],
      [{ name: 'ok', external_id: 'has space' }, '/body/external_id'],
      [{ name: 'ok', external_id: 'x'.repeat(129) }, '/body/external_id'],
      [{ name: 'ok', external_id: '' }, '/body/external_id'],
      [{ name: 'ok', external_id: 7 }, '/body/external_id'],
      [{ name: 'ok', surprise: true }, '/body/surprise'],
      [{ name: 'ok', metadata: 'no' }, '/body/metadata'],
      [{ name: 'ok', metadata: { n: 1 } }, '/body/metadata/n'],
      [{ name: 'ok', metadata: { k: 'v'.repeat(501) } }, '/body/metadata/k'],
      [{ name: 'ok', metadata: { ['k'.repeat(41)]: 'v' } }, '/body/metadata'],
      [
        { name: 'ok', metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, 'v'])) },
        '/body/metadata',
      ],
      [[{ name: 'array' }], '/body'],
      [{ name: 'a\u0000b' }, '/body/name'],
      [{ name: 'ok', metadata: { k: 'a\u0000b' } }, '/body/metadata/k'],
      [{ name: 'ok', metadata: { 'a\u0000b': 'v' } }, '/body/metadata'],
      ['"string"', '/body'],
    ]
    for (const [body, path] of cases) {
      const res = await gw.call(p.apiKey, {
        method: 'POST',
        url: '/v1/sub-accounts',
        ...(body === undefined ? {} : { body }),
      })
      t.equal(res.statusCode, 400, JSON.stringify(body))
      const problem = problemOf(res)
      t.equal(problem.code, 'validation_failed')
      t.ok(
        problem.errors?.some((e) => e.path === path),
        `${JSON.stringify(body)} names ${path}: ${JSON.stringify(problem.errors)}`,
      )
    }
    t.equal(await count('tenants'), before)
  })

  t.test('name limits count characters after trimming', async (t) => {
    const p = await freshParent()
    const longest = 'é'.repeat(200)
    const res = await gw.call(p.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: ` ${longest} ` } })
    t.equal(res.statusCode, 201)
    t.equal(res.json().name, longest)
    const metadata = Object.fromEntries(
      Array.from({ length: 50 }, (_, i) => [`k${i}`.padEnd(40, 'x'), 'v'.repeat(500)]),
    )
    const full = await gw.call(p.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      acting: 'self',
      body: { name: 'm', metadata },
    })
    t.equal(full.statusCode, 201)
    t.same(full.json().metadata, metadata)
  })

  t.test('external_id is unique per parent only', async (t) => {
    const p = await freshParent()
    const other = await freshParent()
    const first = await gw.call(p.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      body: { name: 'a', external_id: 'shared' },
    })
    t.equal(first.statusCode, 201)
    const again = await gw.call(p.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      acting: 'self',
      body: { name: 'b', external_id: 'shared' },
    })
    t.equal(again.statusCode, 409)
    t.equal(problemOf(again).code, 'external_id_conflict')
    const elsewhere = await gw.call(other.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      body: { name: 'c', external_id: 'shared' },
    })
    t.equal(elsewhere.statusCode, 201)
    t.equal(Number((await gw.sql`select count(*)::int as n from tenants where parent_id = ${p.id}`)[0]!.n), 1)
  })

  t.test('get', async (t) => {
    const p = await freshParent()
    const created = (await gw.call(p.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'g' } })).json()
    const res = await gw.call(p.apiKey, { method: 'GET', url: `/v1/sub-accounts/${created.id}` })
    t.equal(res.statusCode, 200)
    t.same(res.json(), created)
    const upper = await gw.call(p.apiKey, { method: 'GET', url: `/v1/sub-accounts/${created.id.toUpperCase()}` })
    t.equal(upper.statusCode, 200, 'a UUID in upper case')
    for (const id of [
      'not-a-uuid',
      '00000000-0000-4000-8000-000000000000',
      "1' or '1'='1",
      'x'.repeat(150),
      'x'.repeat(5000),
    ]) {
      const missing = await gw.call(p.apiKey, { method: 'GET', url: `/v1/sub-accounts/${encodeURIComponent(id)}` })
      t.equal(missing.statusCode, 404, id.slice(0, 40))
      t.equal(problemOf(missing).code, 'not_found')
    }
  })

  t.test('list: oldest first, cursor paging, filters', async (t) => {
    const p = await freshParent()
    // Positions that cross a digit boundary (98 … 102): a text sort would put 100 before 98.
    await gw.sql`alter table tenants alter column seq restart with 98`
    const ids: string[] = []
    for (let i = 0; i < 5; i++) {
      const res = await gw.call(p.apiKey, {
        method: 'POST',
        url: '/v1/sub-accounts',
        acting: 'self',
        body: { name: `s${i}`, external_id: `e${i}` },
      })
      ids.push(res.json().id)
    }
    await gw.call(p.apiKey, { method: 'POST', url: `/v1/sub-accounts/${ids[1]}/deactivate`, acting: 'self' })
    // Another parent's sub-accounts never show.
    const other = await freshParent()
    await gw.call(other.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'theirs' } })

    const seen: string[] = []
    let cursor: string | null = null
    let pages = 0
    do {
      const res = await gw.call(p.apiKey, {
        method: 'GET',
        url: '/v1/sub-accounts',
        query: { limit: '2', ...(cursor ? { cursor } : {}) },
      })
      t.equal(res.statusCode, 200)
      const page = res.json()
      t.ok(page.data.length <= 2)
      seen.push(...page.data.map((s: { id: string }) => s.id))
      cursor = page.next_cursor
      pages++
    } while (cursor !== null && pages < 10)
    t.same(seen, ids, 'every sub-account once, oldest first')
    t.equal(pages, 3)

    const defaults = (await gw.call(p.apiKey, { method: 'GET', url: '/v1/sub-accounts' })).json()
    t.equal(defaults.data.length, 5)
    t.equal(defaults.next_cursor, null)

    const active = (await gw.call(p.apiKey, { method: 'GET', url: '/v1/sub-accounts?status=active' })).json()
    t.same(
      active.data.map((s: { id: string }) => s.id),
      [ids[0], ids[2], ids[3], ids[4]],
    )
    const deactivated = (await gw.call(p.apiKey, { method: 'GET', url: '/v1/sub-accounts?status=deactivated' })).json()
    t.same(
      deactivated.data.map((s: { id: string }) => s.id),
      [ids[1]!],
    )
    const byExt = (await gw.call(p.apiKey, { method: 'GET', url: '/v1/sub-accounts?external_id=e3' })).json()
    t.same(
      byExt.data.map((s: { id: string }) => s.id),
      [ids[3]],
    )
    const none = (await gw.call(p.apiKey, { method: 'GET', url: '/v1/sub-accounts?external_id=nope' })).json()
    t.same(none, { data: [], next_cursor: null })
  })

  t.test('list: bad query parameters', async (t) => {
    for (const [query, path] of [
      ['limit=0', '/querystring/limit'],
      ['limit=101', '/querystring/limit'],
      ['limit=abc', '/querystring/limit'],
      ['limit=2.5', '/querystring/limit'],
      ['status=gone', '/querystring/status'],
      ['external_id=a%20b', '/querystring/external_id'],
      ['cursor=nonsense', '/querystring/cursor'],
      [`cursor=${Buffer.from('s:-1').toString('base64url')}`, '/querystring/cursor'],
      ['colour=red', '/querystring/colour'],
    ] as const) {
      const res = await gw.call(parent.apiKey, { method: 'GET', url: `/v1/sub-accounts?${query}` })
      t.equal(res.statusCode, 400, query)
      const problem = problemOf(res)
      t.equal(problem.code, 'validation_failed')
      t.ok(
        problem.errors?.some((e) => e.path === path),
        `${query}: ${JSON.stringify(problem.errors)}`,
      )
    }
  })

  t.test('update', async (t) => {
    const p = await freshParent()
    const created = (
      await gw.call(p.apiKey, {
        method: 'POST',
        url: '/v1/sub-accounts',
        body: { name: 'u', external_id: 'u1', metadata: { a: '1' } },
      })
    ).json()
    const taken = (
      await gw.call(p.apiKey, {
        method: 'POST',
        url: '/v1/sub-accounts',
        acting: 'self',
        body: { name: 'v', external_id: 'taken' },
      })
    ).json()
    const url = `/v1/sub-accounts/${created.id}`

    const renamed = await gw.call(p.apiKey, { method: 'PATCH', url, acting: 'self', body: { name: ' Renamed ' } })
    t.equal(renamed.statusCode, 200)
    t.match(renamed.json(), { name: 'Renamed', external_id: 'u1', metadata: { a: '1' } })
    t.ok(renamed.json().updated_at > created.updated_at, 'updated_at moves')
    t.equal(renamed.json().created_at, created.created_at)

    const meta = await gw.call(p.apiKey, { method: 'PATCH', url, acting: 'self', body: { metadata: { b: '2' } } })
    t.same(meta.json().metadata, { b: '2' }, 'metadata is replaced as a whole')
    const ext = await gw.call(p.apiKey, { method: 'PATCH', url, acting: 'self', body: { external_id: 'u2' } })
    t.equal(ext.json().external_id, 'u2')
    const cleared = await gw.call(p.apiKey, { method: 'PATCH', url, acting: 'self', body: { external_id: null } })
    t.equal(cleared.statusCode, 200)
    t.equal(cleared.json().external_id, null)

    const conflict = await gw.call(p.apiKey, {
      method: 'PATCH',
      url,
      acting: 'self',
      body: { external_id: 'taken', name: 'lost' },
    })
    t.equal(conflict.statusCode, 409)
    t.equal(problemOf(conflict).code, 'external_id_conflict')
    const after = (await gw.call(p.apiKey, { method: 'GET', url })).json()
    t.equal(after.name, 'Renamed', 'a refused update changes nothing')
    const takenNow = (await gw.call(p.apiKey, { method: 'GET', url: `/v1/sub-accounts/${taken.id}` })).json()
    t.equal(takenNow.external_id, 'taken', 'the other sub-account keeps its external_id')

    for (const [body, path] of [
      [{}, '/body'],
      [{ colour: 'red' }, '/body/colour'],
      [{ name: '' }, '/body/name'],
      [{ name: null }, '/body/name'],
      [{ metadata: null }, '/body/metadata'],
      [{ status: 'deactivated' }, '/body/status'],
    ] as const) {
      const res = await gw.call(p.apiKey, { method: 'PATCH', url, acting: 'self', body })
      t.equal(res.statusCode, 400, JSON.stringify(body))
      t.ok(
        problemOf(res).errors?.some((e) => e.path === path),
        `${JSON.stringify(body)} names ${path}`,
      )
    }
    const noBody = await gw.call(p.apiKey, { method: 'PATCH', url, acting: 'self' })
    t.equal(noBody.statusCode, 400)
    t.same((await gw.call(p.apiKey, { method: 'GET', url })).json(), after, 'nothing changed')

    const missing = await gw.call(p.apiKey, {
      method: 'PATCH',
      url: '/v1/sub-accounts/00000000-0000-4000-8000-000000000000',
      acting: 'self',
      body: { name: 'x' },
    })
    t.equal(missing.statusCode, 404)
  })

  t.test('deactivate and reactivate, repeatable', async (t) => {
    const p = await freshParent()
    const created = (await gw.call(p.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'd' } })).json()
    const url = `/v1/sub-accounts/${created.id}`
    const off = await gw.call(p.apiKey, { method: 'POST', url: `${url}/deactivate`, acting: 'self' })
    t.equal(off.statusCode, 200)
    t.equal(off.json().status, 'deactivated')
    t.ok(off.json().deactivated_at)
    // The parent has no active sub-account now: the header is no longer required.
    const again = await gw.call(p.apiKey, {
      method: 'POST',
      url: `${url}/deactivate`,
      headers: { 'content-type': 'application/json' },
    })
    t.equal(again.statusCode, 200, 'a JSON content type with no body is accepted')
    t.same(again.json(), off.json(), 'repeating changes nothing')

    const on = await gw.call(p.apiKey, { method: 'POST', url: `${url}/reactivate` })
    t.equal(on.statusCode, 200)
    t.match(on.json(), { status: 'active', deactivated_at: null })
    const onAgain = await gw.call(p.apiKey, { method: 'POST', url: `${url}/reactivate`, acting: 'self' })
    t.same(onAgain.json(), on.json())
    // curl -X POST -d '' sends a form content type with an empty body: nothing to refuse.
    const curlStyle = await gw.call(p.apiKey, {
      method: 'POST',
      url: `${url}/reactivate`,
      acting: 'self',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': '0' },
    })
    t.equal(curlStyle.statusCode, 200)

    for (const action of ['deactivate', 'reactivate']) {
      const missing = await gw.call(p.apiKey, {
        method: 'POST',
        url: `/v1/sub-accounts/nope/${action}`,
        acting: 'self',
      })
      t.equal(missing.statusCode, 404)
      t.equal(problemOf(missing).code, 'not_found')
    }
  })

  t.test('keys: mint, list, revoke', async (t) => {
    const p = await freshParent()
    const sub = (await gw.call(p.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'k' } })).json()
    const keysUrl = `/v1/sub-accounts/${sub.id}/api-keys`
    await gw.sql`alter table api_keys alter column seq restart with 99`
    const minted = await gw.call(p.apiKey, {
      method: 'POST',
      url: keysUrl,
      acting: 'self',
      body: { name: 'ci', scopes: ['tracking:read', 'tracking:write', 'tracking:read'] },
    })
    t.equal(minted.statusCode, 201)
    t.equal(minted.headers['cache-control'], 'no-store')
    const key = minted.json()
    t.same(Object.keys(key).sort(), [
      'api_key',
      'client_secret',
      'created_at',
      'expires_at',
      'id',
      'ip_allowlist',
      'name',
      'origin',
      'prefix',
      'rolled_from',
      'scopes',
      'status',
    ])
    t.equal(key.expires_at, null, 'never expires unless asked')
    t.equal(key.rolled_from, null)
    t.match(key.api_key, /^tgw_[0-9A-Za-z]{49}$/)
    t.match(key.client_secret, /^tgws_[0-9A-Za-z]{49}$/)
    t.equal(key.prefix, key.api_key.slice(0, 12))
    t.same(key.scopes, ['tracking:read', 'tracking:write'], 'duplicates dropped, order kept')
    t.equal(key.status, 'active')

    // Neither the key nor the secret is stored, in any column.
    const stored = JSON.stringify(await gw.sql`select * from api_keys where id = ${key.id}`)
    t.notOk(stored.includes(key.api_key.slice(12)), 'key value not stored')
    t.notOk(stored.includes(key.client_secret.slice(5)), 'client secret not stored')

    const second = (
      await gw.call(p.apiKey, {
        method: 'POST',
        url: keysUrl,
        acting: 'self',
        body: { name: 'two', scopes: ['rates:read'] },
      })
    ).json()
    const list = await gw.call(p.apiKey, { method: 'GET', url: keysUrl })
    t.equal(list.statusCode, 200)
    const listed = list.json()
    t.same(
      listed.data.map((k: { id: string }) => k.id),
      [key.id, second.id],
    )
    t.same(Object.keys(listed.data[0]).sort(), [
      'created_at',
      'expires_at',
      'id',
      'ip_allowlist',
      'last_used_at',
      'leaked',
      'name',
      'origin',
      'prefix',
      'revoked_at',
      'rolled_from',
      'scopes',
      'status',
    ])
    t.notOk(list.body.includes(key.api_key) || list.body.includes(key.client_secret), 'secrets never listed again')
    const page1 = (await gw.call(p.apiKey, { method: 'GET', url: `${keysUrl}?limit=1` })).json()
    t.equal(page1.data.length, 1)
    const page2 = (
      await gw.call(p.apiKey, { method: 'GET', url: `${keysUrl}?limit=1&cursor=${page1.next_cursor}` })
    ).json()
    t.same(
      page2.data.map((k: { id: string }) => k.id),
      [second.id],
    )
    t.equal(page2.next_cursor, null)

    const revoked = await gw.call(p.apiKey, { method: 'POST', url: `${keysUrl}/${key.id}/revoke`, acting: 'self' })
    t.equal(revoked.statusCode, 200)
    t.match(revoked.json(), { id: key.id, status: 'revoked' })
    t.ok(revoked.json().revoked_at)
    t.notOk('api_key' in revoked.json())
    const revokedAgain = await gw.call(p.apiKey, { method: 'POST', url: `${keysUrl}/${key.id}/revoke`, acting: 'self' })
    t.same(revokedAgain.json(), revoked.json(), 'repeating changes nothing')

    // A key is found only under its own sub-account.
    const otherSub = (
      await gw.call(p.apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name: 'k2' } })
    ).json()
    for (const url of [
      `/v1/sub-accounts/${otherSub.id}/api-keys/${second.id}/revoke`,
      `${keysUrl}/00000000-0000-4000-8000-000000000000/revoke`,
      `${keysUrl}/not-a-key/revoke`,
    ]) {
      const res = await gw.call(p.apiKey, { method: 'POST', url, acting: 'self' })
      t.equal(res.statusCode, 404, url)
      t.equal(problemOf(res).code, 'not_found')
    }
    t.equal((await gw.call(p.apiKey, { method: 'GET', url: keysUrl })).json().data[1].status, 'active')
  })

  t.test('keys: invalid input changes nothing', async (t) => {
    const p = await freshParent()
    const sub = (await gw.call(p.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'k' } })).json()
    const keysUrl = `/v1/sub-accounts/${sub.id}/api-keys`
    const before = await count('api_keys')
    for (const [body, path] of [
      [{ name: 'x', scopes: ['sub_accounts:read'] }, '/body/scopes/0'],
      [{ name: 'x', scopes: ['tracking:read', 'sub_accounts:write'] }, '/body/scopes/1'],
      [{ name: 'x', scopes: [] }, '/body/scopes'],
      [{ name: 'x', scopes: ['Tracking:Read'] }, '/body/scopes/0'],
      [{ name: 'x', scopes: ['tracking read'] }, '/body/scopes/0'],
      [{ name: 'x', scopes: 'tracking:read' }, '/body/scopes'],
      [{ name: 'x', scopes: Array.from({ length: 51 }, (_, i) => `s${i}:read`) }, '/body/scopes'],
      [{ scopes: ['tracking:read'] }, '/body/name'],
      [{ name: ' ', scopes: ['tracking:read'] }, '/body/name'],
      [{ name: 'x' }, '/body/scopes'],
      [{ name: 'x', scopes: ['a:b'], expires: 1 }, '/body/expires'],
    ] as const) {
      const res = await gw.call(p.apiKey, { method: 'POST', url: keysUrl, acting: 'self', body })
      t.equal(res.statusCode, 400, JSON.stringify(body))
      t.ok(
        problemOf(res).errors?.some((e) => e.path === path),
        `${JSON.stringify(body)} names ${path}: ${res.body}`,
      )
    }
    const missing = await gw.call(p.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts/00000000-0000-4000-8000-000000000000/api-keys',
      acting: 'self',
      body: { name: 'x', scopes: ['a:b'] },
    })
    t.equal(missing.statusCode, 404)
    const missingList = await gw.call(p.apiKey, {
      method: 'GET',
      url: '/v1/sub-accounts/00000000-0000-4000-8000-000000000000/api-keys',
    })
    t.equal(missingList.statusCode, 404)
    t.equal(await count('api_keys'), before)
  })
})
