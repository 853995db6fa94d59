// The request log (docs/api.md, Request log) over real sockets, Postgres and an upstream: a record
// for each kind of answer once the key is known, none before, nothing secret in any, the filters,
// isolation between parents, and pages that stay whole while records keep coming.
import pino from 'pino'
import t from 'tap'
import { MAX_ROWS_READ } from '../../src/request-log/queries.js'
import { RequestLogWriter } from '../../src/request-log/writer.js'
import { loggerOptions } from '../../src/ops/logging.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { until } from '../helpers/poll.js'
import { logRecord, madeId } from '../helpers/request-records.js'
import { accessToken, clientKey } from '../helpers/tokens.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t, (request, response, received) => {
  if (request.url!.startsWith('/api/fail')) {
    response.writeHead(503, { 'content-type': 'text/plain', 'content-length': '4' })
    return response.end('down')
  }
  if (request.url!.startsWith('/api/refuse-headers')) {
    response.writeHead(431, { 'content-type': 'text/plain' })
    return response.end('too many')
  }
  if (request.url!.startsWith('/api/chunked')) {
    response.writeHead(200, { 'content-type': 'text/plain' })
    response.write('a'.repeat(1000))
    return response.end('b'.repeat(24))
  }
  response.writeHead(200, { 'content-type': 'application/json' })
  response.end(JSON.stringify(received))
})
/** What the gateway logs, a JSON line each. */
const logged: string[] = []
const gw = await startGateway(t, {
  logger: pino(loggerOptions('info'), { write: (line: string) => logged.push(line) }),
  requestLog: { flushIntervalMs: 50 },
  gatewayConfig: {
    routes: [{ prefix: '/api', upstream: upstream.url, scopes: { read: ['api:read'], write: ['api:write'] } }],
  },
})

const PARENT_SCOPES = ['sub_accounts:read', 'sub_accounts:write', 'api:read']

async function manage(key: string, method: string, path: string, json?: unknown): Promise<JsonBody> {
  const res = await callAs(gw.url, key, { method, path: `/v1/sub-accounts${path}`, acting: 'self', json })
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.body}`)
  return res.json()
}

async function requests(key: string, query = ''): Promise<RawResponse> {
  return callAs(gw.url, key, { path: `/v1/sub-accounts/requests${query}`, acting: 'self' })
}

/** The parent's records of the request with this X-Request-Id, once written (polled). */
async function recordOf(key: string, requestId: string): Promise<JsonBody> {
  let found: JsonBody | null = null
  await until(5_000, async () => {
    const res = await callAs(gw.url, key, { path: `/v1/sub-accounts/requests/${requestId}`, acting: 'self' })
    if (res.status === 200) found = res.json()
    return found !== null
  })
  if (found === null) throw new Error(`no record of ${requestId}`)
  return found
}

const idOf = (res: RawResponse) => res.headers['x-request-id'] as string

t.test('a record for each kind of answer once the key is known, none before', async (t) => {
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const created = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'logged' },
  })
  t.equal(created.status, 201)
  const sub = created.json().id as string
  const limited = (
    await manage(parent.apiKey, 'POST', '', { name: 'limited', limits: { rate: { requests: 1, per_seconds: 60 } } })
  ).id as string
  const revokedKey = await manage(parent.apiKey, 'POST', `/${sub}/api-keys`, { name: 'old', scopes: ['api:read'] })
  await manage(parent.apiKey, 'POST', `/${sub}/api-keys/${revokedKey.id}/revoke`)
  const writer = await manage(parent.apiKey, 'POST', `/${sub}/api-keys`, { name: 'w', scopes: ['api:write'] })

  // Refused before the key is known: no record.
  const unknownKey = await callAs(gw.url, `tgw_${'x'.repeat(40)}`, { path: '/api/unknown-key' })
  t.equal(unknownKey.status, 401)
  const noKey = await callAs(gw.url, null, { path: '/api/no-key' })
  t.equal(noKey.status, 401)
  const flood = await callAs(gw.url, parent.apiKey, {
    path: '/api/header-flood',
    acting: sub,
    headers: Array.from({ length: 120 }, (_, i): [string, string] => [`x-filler-${i}`, 'y']),
  })
  t.equal(flood.status, 431, "the gateway's own 431 comes before authentication")

  const answers = {
    ok: await callAs(gw.url, parent.apiKey, { path: '/api/ok?page=2', acting: sub }),
    upstreamDown: await callAs(gw.url, parent.apiKey, { path: '/api/fail', acting: sub }),
    upstream431: await callAs(gw.url, parent.apiKey, { path: '/api/refuse-headers', acting: sub }),
    scope: await callAs(gw.url, parent.apiKey, { method: 'POST', path: '/api/write', acting: sub, body: 'hello' }),
    revoked: await callAs(gw.url, revokedKey.api_key, { path: '/api/with-revoked-key' }),
    chunked: await callAs(gw.url, parent.apiKey, { path: '/api/chunked', acting: sub }),
  }
  // A body of no declared length (a stream): sent chunked, in two pieces.
  const streamed: RequestInit & { duplex: 'half' } = {
    method: 'POST',
    headers: { authorization: `Bearer ${writer.api_key}` },
    body: new ReadableStream({
      start(controller) {
        controller.enqueue(Buffer.from('u'.repeat(1000)))
        controller.enqueue(Buffer.from('v'.repeat(2000)))
        controller.close()
      },
    }),
    duplex: 'half',
  }
  const upload = await fetch(`${gw.url}/api/upload`, streamed)
  t.equal(upload.status, 200, await upload.text())
  let rateLimited: RawResponse | null = null
  for (let i = 0; i < 6 && rateLimited === null; i++) {
    const res = await callAs(gw.url, parent.apiKey, { path: '/api/limited', acting: limited })
    if (res.status === 429) rateLimited = res
  }
  t.equal(answers.ok.status, 200)
  t.equal(answers.upstreamDown.status, 503)
  t.equal(answers.upstream431.status, 431)
  t.equal(answers.scope.status, 403)
  t.equal(answers.revoked.status, 401)
  t.ok(rateLimited, 'the limited sub-account was refused 429')

  const ok = await recordOf(parent.apiKey, idOf(answers.ok))
  t.match(ok, {
    id: idOf(answers.ok),
    account_id: parent.id,
    tenant_id: sub,
    key_id: parent.keyId,
    method: 'GET',
    route: '/api',
    path: '/api/ok',
    status: 200,
    code: null,
    request_bytes: 0,
    source_ip: '127.0.0.1',
  })
  t.equal(ok.response_bytes, Buffer.byteLength(answers.ok.body), 'the body as sent (chunked, counted)')
  t.ok(Number.isFinite(ok.duration_ms) && (ok.duration_ms as number) > 0)
  t.ok(Math.abs(Date.parse(ok.time as string) - Date.now()) < 60_000, 'the time is when it arrived')
  t.match(await recordOf(parent.apiKey, idOf(answers.upstreamDown)), { status: 503, code: null, route: '/api' })
  t.match(await recordOf(parent.apiKey, idOf(answers.upstream431)), { status: 431, code: null })
  t.match(await recordOf(parent.apiKey, idOf(answers.scope)), {
    method: 'POST',
    status: 403,
    code: 'insufficient_scope',
    request_bytes: 5,
  })
  t.match(await recordOf(parent.apiKey, idOf(answers.revoked)), {
    status: 401,
    code: 'unauthenticated',
    key_id: revokedKey.id,
    tenant_id: sub,
    account_id: parent.id,
    path: '/api/with-revoked-key',
  })
  t.match(await recordOf(parent.apiKey, idOf(rateLimited!)), { status: 429, code: 'rate_limited', tenant_id: limited })
  t.match(await recordOf(parent.apiKey, idOf(created)), {
    method: 'POST',
    route: 'management',
    path: '/v1/sub-accounts',
    status: 201,
    tenant_id: parent.id,
  })
  const chunked = await recordOf(parent.apiKey, idOf(answers.chunked))
  t.equal(answers.chunked.headers['content-length'], undefined, 'the upstream answered chunked')
  t.equal(chunked.response_bytes, 1024, 'a chunked body of two chunks counted whole')
  const uploaded = await recordOf(parent.apiKey, upload.headers.get('x-request-id')!)
  t.equal(uploaded.request_bytes, 3000, 'a chunked upload counted as the proxy passed it on')
  t.equal(uploaded.key_id, writer.id)
  t.equal(
    (await recordOf(parent.apiKey, idOf(answers.upstreamDown))).response_bytes,
    4,
    'a Content-Length answer: its length',
  )

  // Everything above is written; the refusals before authentication are not.
  const all = (await requests(parent.apiKey, '?limit=100')).json().data as JsonBody[]
  for (const path of ['/api/unknown-key', '/api/no-key', '/api/header-flood'])
    t.notOk(
      all.some((record) => record.path === path),
      `no record of ${path}`,
    )
  const rows = await gw.sql<
    { path: string }[]
  >`select path from request_log where path in ('/api/unknown-key', '/api/no-key', '/api/header-flood')`
  t.same(rows, [], 'not under any account either')
})

t.test("an access token whose key was revoked: its 401 recorded for the key's account", async (t) => {
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const client = await clientKey(gw.url, parent, ['api:read'])
  const token = await accessToken(gw.url, client)
  await manage(parent.apiKey, 'POST', `/${client.subId}/api-keys/${client.keyId}/revoke`)
  const refused = await callAs(gw.url, token, { path: '/api/with-revoked-token' })
  t.equal(refused.status, 401)
  t.match(await recordOf(parent.apiKey, idOf(refused)), {
    status: 401,
    key_id: client.keyId,
    tenant_id: client.subId,
    account_id: parent.id,
    path: '/api/with-revoked-token',
  })
})

t.test('nothing secret in any record: no key, client secret, token or query string', async (t) => {
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const client = await clientKey(gw.url, parent, ['api:read'])
  const token = await accessToken(gw.url, client)
  const secrets = [parent.apiKey, client.apiKey, client.clientSecret, token]
  const query = `?api_key=${client.apiKey}&client_secret=${client.clientSecret}&access_token=${token}`
  const sent = [
    await callAs(gw.url, token, { path: `/api/secret-path${query}` }),
    await callAs(gw.url, client.apiKey, {
      method: 'POST',
      path: `/api/secret-path${query}`,
      body: client.clientSecret,
    }),
    await callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts${query}`, acting: 'self' }),
  ]
  t.same(
    sent.map((res) => res.status),
    [200, 403, 400],
  )
  for (const res of sent) await recordOf(parent.apiKey, idOf(res))
  const stored = await gw.sql<
    { row: string }[]
  >`select r::text as row from request_log r where account_id = ${parent.id}`
  const listed = (await requests(parent.apiKey, '?limit=100')).body
  for (const text of [stored.map((r) => r.row).join('\n'), listed]) {
    for (const secret of secrets) t.notOk(text.includes(secret), 'no credential is kept')
    t.notOk(text.includes('?') || text.includes('api_key='), 'no query string is kept')
  }
  t.match(await recordOf(parent.apiKey, idOf(sent[0]!)), {
    key_id: client.keyId,
    tenant_id: client.subId,
    path: '/api/secret-path',
  })
})

t.test('filters: sub-account, key, status and class, code, route, time; bad ones refused', async (t) => {
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const a = (await manage(parent.apiKey, 'POST', '', { name: 'a' })).id as string
  const b = (await manage(parent.apiKey, 'POST', '', { name: 'b' })).id as string
  const bKey = await manage(parent.apiKey, 'POST', `/${b}/api-keys`, { name: 'b key', scopes: ['api:read'] })
  const before = new Date().toISOString()
  // A record's time is Date.now() less the request's elapsed time: up to a millisecond early.
  await new Promise((resolve) => setTimeout(resolve, 5))
  await callAs(gw.url, parent.apiKey, { path: '/api/a1', acting: a })
  await callAs(gw.url, parent.apiKey, { path: '/api/fail', acting: a })
  await callAs(gw.url, parent.apiKey, { method: 'POST', path: '/api/a-write', acting: a, body: 'x' })
  const last = await callAs(gw.url, bKey.api_key, { path: '/api/b1' })
  await recordOf(parent.apiKey, idOf(last))

  const paths = async (query: string) =>
    ((await requests(parent.apiKey, query)).json().data as JsonBody[]).map((r) => r.path)
  t.same(await paths(`?sub_account_id=${a}`), ['/api/a-write', '/api/fail', '/api/a1'], 'newest first')
  t.same(await paths(`?sub_account_id=${a.toUpperCase()}`), ['/api/a-write', '/api/fail', '/api/a1'])
  t.same(await paths(`?key_id=${bKey.id}`), ['/api/b1'])
  t.same(await paths(`?sub_account_id=${a}&status=5xx`), ['/api/fail'])
  const capitals = await requests(parent.apiKey, `?sub_account_id=${a}&status=5XX`)
  t.equal(capitals.status, 200, 'a class in capitals, as often written')
  t.same(
    (capitals.json().data as JsonBody[] | undefined)?.map((r) => r.path),
    ['/api/fail'],
  )
  t.same(await paths(`?sub_account_id=${a}&status=403`), ['/api/a-write'])
  t.same(await paths(`?sub_account_id=${a}&status=4xx&code=insufficient_scope`), ['/api/a-write'])
  t.same(await paths(`?sub_account_id=${a}&status=2xx&route=/api`), ['/api/a1'])
  const methods = async (query: string) =>
    ((await requests(parent.apiKey, query)).json().data as JsonBody[]).map((r) => r.method)
  t.notOk((await methods(`?route=management&since=${before}`)).includes('POST'), 'the managing came before `since`')
  t.same(
    (await methods(`?route=management&until=${before}`)).filter((m) => m === 'POST').length,
    3,
    'two sub-accounts and a key made through management',
  )
  t.same(await paths(`?sub_account_id=${a}&until=${before}`), [])

  for (const bad of [
    '?status=6xx',
    '?status=20',
    '?sub_account_id=not-a-uuid',
    '?code=Not-A-Code',
    '?since=yesterday',
    `?since=${new Date().toISOString()}&until=${before}`,
    '?limit=101',
    '?cursor=forged',
    '?colour=blue',
  ]) {
    const res = await requests(parent.apiKey, bad)
    t.equal(res.status, 400, `${bad}: 400`)
    t.equal(res.json().code, 'validation_failed')
  }
  // Each says what the value must be, not only the pattern it failed.
  for (const [bad, message] of [
    ['?status=6xx', /a status \(`404`\) or a class \(`4xx`\)/],
    ['?sub_account_id=not-a-uuid', /must be a UUID/],
    ['?since=yesterday', /must be an RFC 3339 date-time/],
  ] as const) {
    const res = await requests(parent.apiKey, bad)
    t.match(res.json().errors[0].message, message, `${bad}: says what to send`)
  }
  const missing = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/requests/no-such-id', acting: 'self' })
  t.equal(missing.status, 404)
})

// The last day of 9999 is a day like any other (docs/api.md): its next midnight, where a page's
// search for its newest row stops, is no time the store takes, nor one to ask it for.
t.test('until on the last day of 9999: the records before it, never a 500', async (t) => {
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const sub = (await manage(parent.apiKey, 'POST', '', { name: 'late' })).id as string
  const link = await manage(parent.apiKey, 'POST', `/${sub}/portal-sessions`, { permissions: ['requests:read'] })
  const exchanged = await fetch(`${gw.url}/portal/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token: (link.url as string).split('#')[1] }),
  })
  const cookie = exchanged.headers.get('set-cookie')!.split(';')[0]!
  await recordOf(parent.apiKey, idOf(await callAs(gw.url, parent.apiKey, { path: '/api/late', acting: sub })))
  for (const at of ['9999-12-31T23:59:59.999Z', '9999-12-31T00:00:00.001Z', '9999-12-31T23:00:00-00:59']) {
    const until = encodeURIComponent(at)
    for (const query of [
      `?until=${until}`,
      `?sub_account_id=${sub}&until=${until}`,
      `?since=0001-01-01T00:00:00Z&until=${until}`,
    ]) {
      const res = await requests(parent.apiKey, query)
      t.equal(res.status, 200, `${query}: ${res.body.slice(0, 200)}`)
      // The parent's own calls here are recorded too: the management ones.
      const paths = ((res.json().data as JsonBody[] | undefined) ?? []).map((r) => r.path)
      t.ok(paths.includes('/api/late'), `${query}: the record`)
    }
    const portal = await fetch(`${gw.url}/portal/api/requests?until=${until}`, { headers: { cookie } })
    const body = await portal.text()
    t.equal(portal.status, 200, `portal ?until=${at}: ${body.slice(0, 200)}`)
    const paths = (JSON.parse(body).data as JsonBody[] | undefined)?.map((r) => r.path)
    t.same(paths, ['/api/late'], "the portal too: its sub-account's record")
  }
})

t.test('isolation: a parent sees its own records only, by any way of asking', async (t) => {
  const one = await gw.createParent({ scopes: PARENT_SCOPES })
  const other = await gw.createParent({ scopes: PARENT_SCOPES })
  const sub = (await manage(one.apiKey, 'POST', '', { name: 'mine' })).id as string
  const mine = await callAs(gw.url, one.apiKey, { path: '/api/private', acting: sub })
  const more = await callAs(gw.url, one.apiKey, { path: '/api/more', acting: sub })
  await recordOf(one.apiKey, idOf(more))

  const theirs = (await requests(other.apiKey, '?limit=100')).json().data as JsonBody[]
  t.notOk(
    theirs.some((r) => r.account_id !== other.id),
    "only the other parent's own records",
  )
  t.same((await requests(other.apiKey, `?sub_account_id=${sub}`)).json().data, [])
  const byId = await callAs(gw.url, other.apiKey, { path: `/v1/sub-accounts/requests/${idOf(mine)}`, acting: 'self' })
  t.equal(byId.status, 404)
  const page = (await requests(one.apiKey, `?sub_account_id=${sub}&limit=1`)).json()
  t.ok(page.next_cursor)
  const stolen = await requests(other.apiKey, `?cursor=${page.next_cursor}`)
  t.equal(stolen.status, 400, "another parent's cursor is refused")
})

t.test('pages stay whole while records keep coming: none skipped, none repeated', async (t) => {
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const sub = (await manage(parent.apiKey, 'POST', '', { name: 'paged' })).id as string
  const first: string[] = []
  for (let i = 0; i < 30; i++)
    first.push(idOf(await callAs(gw.url, parent.apiKey, { path: `/api/p${i}`, acting: sub })))
  await recordOf(parent.apiKey, first.at(-1)!)

  let traffic = true
  const more = (async () => {
    for (let i = 0; traffic; i++) await callAs(gw.url, parent.apiKey, { path: `/api/later${i}`, acting: sub })
  })()
  const seen: string[] = []
  let cursor: string | null = null
  do {
    const res = await requests(
      parent.apiKey,
      `?sub_account_id=${sub}&route=/api&limit=7${cursor ? `&cursor=${cursor}` : ''}`,
    )
    t.equal(res.status, 200)
    const page = res.json()
    seen.push(...(page.data as JsonBody[]).map((r) => r.id as string))
    cursor = page.next_cursor as string | null
  } while (cursor !== null)
  traffic = false
  await more
  t.equal(new Set(seen).size, seen.length, 'no record twice')
  t.same(
    first.filter((id) => !seen.includes(id)),
    [],
    'every record written before the first page is on a page',
  )
})

// A filter whose rows' summaries all match while their records do not would read every row of
// the account for one page: a page reads MAX_ROWS_READ rows at most, then ends short.
t.test('a page reads so many rows at most: one that found none ends empty, and its cursor goes on', async (t) => {
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  // Rows of two, as a replica writes them: a 200 of /a beside a 500 of /b, so that every row's
  // summary holds route /a and status 500, and only the oldest row a 500 of /a.
  const writer = new RequestLogWriter({ sql: gw.sql, log: pino({ level: 'silent' }), rowRecords: 2 })
  t.teardown(() => writer.close())
  const rows = MAX_ROWS_READ + 200
  for (let i = 0; i < rows; i++) {
    const fields = { accountId: parent.id, timeMs: Date.now() - 60_000 }
    writer.add(logRecord({ ...fields, id: madeId(2 * i), route: '/a', path: `/a/${i}`, status: i === 0 ? 500 : 200 }))
    writer.add(logRecord({ ...fields, id: madeId(2 * i + 1), route: '/b', path: `/b/${i}`, status: 500 }))
  }
  await writer.flush()

  const first = await requests(parent.apiKey, '?route=/a&status=500')
  t.equal(first.status, 200)
  t.same(first.json().data, [], `the first page read ${MAX_ROWS_READ} rows of ${rows} and found none`)
  let cursor = first.json().next_cursor as string | null
  t.ok(cursor, 'and has a cursor all the same')
  const found: string[] = []
  let pages = 1
  while (cursor !== null) {
    const res = await requests(parent.apiKey, `?route=/a&status=500&cursor=${cursor}`)
    t.equal(res.status, 200)
    found.push(...(res.json().data as JsonBody[]).map((r) => r.path as string))
    cursor = res.json().next_cursor as string | null
    pages++
  }
  t.same(found, ['/a/0'], `the one record, on a later page, the last (${pages} pages)`)
})

// A page's statement that Postgres cancels (an operator's pg_cancel_backend, or its
// statement_timeout: the call's 1.5 s) is the store failing, 503; and none outlives its call's 503,
// to hold a pooled connection that every other parent's calls need.
t.test("a page's statement canceled answers 503; none is left waiting after the call's 503", async (t) => {
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const waiting = () => gw.sql<{ pid: number }[]>`
    select pid from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock' and query ~ 'from request_log_rows'`
  // A portal of one of its sub-accounts, whose reads are counted apart from the parent's own.
  const customer = (await manage(parent.apiKey, 'POST', '', { name: 'customer' })).id as string
  const link = await manage(parent.apiKey, 'POST', `/${customer}/portal-sessions`, { permissions: ['requests:read'] })
  const exchanged = await fetch(`${gw.url}/portal/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token: (link.url as string).split('#')[1] }),
  })
  const cookie = exchanged.headers.get('set-cookie')!.split(';')[0]!
  const portalPage = () => fetch(`${gw.url}/portal/api/requests`, { headers: { cookie } })
  await gw.sql.begin(async (tx) => {
    // Held until the checks are done: the page's first statement waits for it.
    await tx`lock table request_log_rows in access exclusive mode`
    const canceled = requests(parent.apiKey)
    const blocked: number[] = []
    t.ok(await until(3_000, async () => blocked.push(...(await waiting()).map((row) => row.pid)) > 0), 'it waits')
    await gw.sql`select pg_cancel_backend(${blocked[0]!})`
    const answer = await canceled
    t.equal(answer.status, 503, `canceled: 503 (${answer.body.slice(0, 200)})`)
    t.match(answer.json(), { code: 'store_unavailable', detail: /cannot be reached/ }, 'at once, not at the deadline')

    const late = await requests(parent.apiKey)
    t.equal(late.status, 503, `503 at the deadline: ${late.body.slice(0, 200)}`)
    t.ok(
      await until(3_000, async () => (await waiting()).length === 0),
      'no statement of the page still waits (statement_timeout)',
    )

    // Another parent's sub-account or key matches nothing, known without reading the log: its rows
    // would be found through indexes that hold every parent's rows.
    const other = await gw.createParent({ scopes: PARENT_SCOPES })
    const otherSub = (await manage(other.apiKey, 'POST', '', { name: 'theirs' })).id as string
    for (const [query, whose] of [
      [`?sub_account_id=${otherSub}`, "another parent's sub-account"],
      [`?sub_account_id=${other.id}`, 'another parent'],
      [`?key_id=${other.keyId}`, "another parent's key"],
    ] as const) {
      const foreign = await requests(parent.apiKey, query)
      t.same(
        [foreign.status, foreign.json()],
        [200, { data: [], next_cursor: null }],
        `${whose}: an empty page at once, the log not read`,
      )
    }
    // Two reads of one parent's at once, both waiting here: a third is refused at once, a lookup by
    // id too; another parent's read is not (it waits for the lock as the two do).
    const both = [requests(parent.apiKey), requests(parent.apiKey, '?status=4xx')]
    t.ok(await until(3_000, async () => (await waiting()).length === 2), 'two reads wait')
    const third = await requests(parent.apiKey, '?route=/api')
    t.same(
      [third.status, third.json().code, third.headers['retry-after']],
      [429, 'too_many_concurrent_requests', '1'],
      `a third read of the same parent: 429 at once (${third.body.slice(0, 160)})`,
    )
    const thirdById = await callAs(gw.url, parent.apiKey, {
      path: '/v1/sub-accounts/requests/0123abcd-0000-4000-8000-000000000007',
      acting: 'self',
    })
    t.equal(thirdById.status, 429, 'and a lookup by id')
    const ofPortal = portalPage()
    t.ok(await until(3_000, async () => (await waiting()).length === 3), "its sub-account's portal read runs")
    const others = requests(other.apiKey)
    t.ok(await until(3_000, async () => (await waiting()).length === 4), "another parent's read runs")
    t.same(
      [...(await Promise.all([...both, others])).map((answer) => answer.status), (await ofPortal).status],
      [503, 503, 503, 503],
      'all four wait for the lock until the deadline',
    )

    const byId = await callAs(gw.url, parent.apiKey, {
      path: '/v1/sub-accounts/requests/0123abcd-0000-4000-8000-000000000007',
      acting: 'self',
    })
    t.equal(byId.status, 503, `a record by its id: 503 at the deadline: ${byId.body.slice(0, 200)}`)
    t.ok(
      await until(3_000, async () => (await waiting()).length === 0),
      'no statement of the lookup still waits (statement_timeout)',
    )
  })
  // Each call answered 503 at its deadline is logged once, as that answer; its handler's own end,
  // after its statements were canceled, is not an error of its own.
  const late = logged.filter((line) => /reply\.sent = true|already sent|FST_ERR_REP_ALREADY_SENT/.test(line))
  t.same(late, [], 'nothing logged of the calls that ended after their 503')
  t.ok(
    logged.some((line) => line.includes('a call answered 503 at its store deadline ended late')),
    'their late end is told at level info',
  )
})
