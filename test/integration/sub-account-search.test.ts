// The sub-accounts list's `q` (docs/api.md, Sub-accounts): a case-insensitive prefix of the name
// or of the external_id, with `%` and `_` taken literally, combined with the other filters and
// with paging whose cursors are bound to the filters; and a plan that uses migration 016's indexes.
import t from 'tap'
import { subAccountPage } from '../../src/store/tenants.js'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

const gw = await startGateway(t, { listen: false, redis: false })
const parent = await gw.createParent()
const stranger = await gw.createParent()

async function create(key: string, name: string, externalId: string | null = null): Promise<string> {
  const res = await gw.call(key, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name, external_id: externalId },
  })
  if (res.statusCode !== 201) throw new Error(`setup: ${res.statusCode} ${res.body}`)
  return res.json().id as string
}

const names = new Map<string, string>()
for (const [name, externalId] of [
  ['Acme EU', 'eu-1'],
  ['Beta', 'ACME-beta'],
  ['Xacme', null],
  ['%off', null],
  ['50% off', null],
  ['a_b', null],
  ['axb', null],
  ['\\slash', null],
  ['acme US', 'us-1'],
] as const) {
  names.set(await create(parent.apiKey, name, externalId), name)
}
await create(stranger.apiKey, 'Acme theirs', 'acme-theirs')

async function list(query: Record<string, string>) {
  const res = await gw.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts', query })
  return { status: res.statusCode, body: res.json(), res }
}

const named = (body: { data: { id: string }[] }) => body.data.map((s) => names.get(s.id))

t.test('q: a prefix of the name or the external_id, case-insensitive', async (t) => {
  for (const q of ['acme', 'ACME', 'Acme', 'aCm']) {
    const { status, body } = await list({ q })
    t.equal(status, 200, q)
    t.same(
      named(body),
      ['Acme EU', 'Beta', 'acme US'],
      `${q}: by name, by external id; not Xacme, not another parent's`,
    )
  }
  t.same(named((await list({ q: 'eu-' })).body), ['Acme EU'], 'an external id prefix')
  t.same(named((await list({ q: 'Acme EU' })).body), ['Acme EU'], 'a whole name')
  t.same(named((await list({ q: 'Acme EU!' })).body), [], 'longer than the name: no match')
  t.same(named((await list({ q: 'cme' })).body), [], 'the middle of a name is not a prefix')
})

t.test('q: % and _ and \\ are literal characters', async (t) => {
  t.same(named((await list({ q: '%' })).body), ['%off'], '% matches only names starting with %')
  t.same(named((await list({ q: '%o' })).body), ['%off'])
  t.same(named((await list({ q: '50%' })).body), ['50% off'])
  t.same(named((await list({ q: 'a_' })).body), ['a_b'], '_ is not any character (not axb)')
  t.same(named((await list({ q: '_' })).body), [], 'no name starts with _')
  t.same(named((await list({ q: '\\' })).body), ['\\slash'], 'a backslash is not an escape')
})

t.test('q with the other filters', async (t) => {
  const beta = [...names].find(([, name]) => name === 'Beta')![0]
  const res = await gw.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${beta}/deactivate`,
    acting: 'self',
  })
  t.equal(res.statusCode, 200)
  t.same(named((await list({ q: 'acme', status: 'deactivated' })).body), ['Beta'])
  t.same(named((await list({ q: 'acme', status: 'active' })).body), ['Acme EU', 'acme US'])
  t.same(named((await list({ q: 'acme', external_id: 'us-1' })).body), ['acme US'])
  t.same(named((await list({ q: 'beta', external_id: 'us-1' })).body), [])
  await gw.call(parent.apiKey, { method: 'POST', url: `/v1/sub-accounts/${beta}/reactivate`, acting: 'self' })
})

t.test('q: paging, and a cursor bound to its filters', async (t) => {
  const seen: string[] = []
  let cursor: string | null = null
  let pages = 0
  do {
    const { status, body } = await list({ q: 'acme', limit: '1', ...(cursor === null ? {} : { cursor }) })
    t.equal(status, 200)
    seen.push(...named(body).map(String))
    cursor = body.next_cursor
    pages++
  } while (cursor !== null && pages < 10)
  t.same(seen, ['Acme EU', 'Beta', 'acme US'], 'every match once, oldest first')

  const first = (await list({ q: 'acme', limit: '1' })).body.next_cursor as string
  for (const query of [
    { q: 'a', cursor: first },
    { q: 'ACME', cursor: first },
    { cursor: first },
    { q: 'acme', status: 'active', cursor: first },
    { q: 'acme', external_id: 'us-1', cursor: first },
  ] as Record<string, string>[]) {
    const { status, res } = await list(query)
    t.equal(status, 400, `${JSON.stringify(query)}: a cursor of q=acme is refused`)
    t.match(problemOf(res), {
      code: 'validation_failed',
      errors: [{ path: '/querystring/cursor', message: 'is not a cursor issued by this API' }],
    })
  }
  // A cursor of the unfiltered list stays what it was: bound to the parent only.
  const unfiltered = (await list({ limit: '1' })).body.next_cursor as string
  t.equal((await list({ limit: '1', cursor: unfiltered })).status, 200)
  t.equal((await list({ q: 'acme', cursor: unfiltered })).status, 400, 'nor an unfiltered cursor under q')
  const statusCursor = (await list({ status: 'active', limit: '1' })).body.next_cursor as string
  t.equal((await list({ status: 'active', limit: '1', cursor: statusCursor })).status, 200)
  t.equal((await list({ status: 'deactivated', cursor: statusCursor })).status, 400, 'nor one of another status')
})

t.test('q: bad values are 400 validation_failed naming q', async (t) => {
  // An empty q is no q (http/query-string.ts): test/integration/empty-query.test.ts.
  for (const q of ['x'.repeat(201), 'a\u0000b']) {
    const { status, res } = await list({ q })
    t.equal(status, 400, JSON.stringify(q.slice(0, 20)))
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed')
    t.ok(
      problem.errors?.some((e) => e.path === '/querystring/q'),
      JSON.stringify(problem.errors),
    )
  }
  t.equal((await list({ q: 'x'.repeat(200) })).status, 200, '200 characters are allowed')
})

t.test('the search is planned on the prefix indexes', async (t) => {
  // Enough sub-accounts that Postgres would rather not read them all.
  const many = await gw.createParent()
  await gw.sql`
    insert into tenants (parent_id, name, external_id)
    select ${many.id}, 'n' || i, 'e' || i from generate_series(1, 5000) as i`
  await gw.sql`analyze tenants`
  const filter = { limit: 21, afterSeq: null, status: null, externalId: null, search: 'n12' }
  const { s, text } = subAccountPage(many.id, filter)
  const plan = await gw.sql.unsafe(`explain ${text}`, s.values, { prepare: false })
  const lines = plan.map((row) => String(row['QUERY PLAN'])).join('\n')
  t.match(lines, /Index Scan on tenants_parent_lower_name/, 'the name prefix reads its index')
  t.match(lines, /Index Scan on tenants_parent_lower_external_id/, 'the external id prefix reads its index')
  t.match(lines, /lower\(name\) ~>=~ 'n12'/, 'as a range of the index, not a filter of every row')
})
