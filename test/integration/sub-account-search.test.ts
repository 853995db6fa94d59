// The sub-accounts list's `q` (docs/api.md, Sub-accounts): a case-insensitive start of any word of
// the name, of the name or of the external_id, with `%` and `_` taken literally, combined with
// the other filters and with paging whose cursors are bound to the filters; every way a page of
// many matches is read gives the same pages; the matches are counted on their indexes.
import t from 'tap'
import { type SearchPlan, subAccountPage, subAccountSearch } from '../../src/store/sub-account-list.js'
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

t.test('q: the start of any word of a name, and the words follow a rename', async (t) => {
  const words = await gw.createParent()
  const ids = new Map<string, string>()
  for (const name of ['Warehouse North', 'North-East Depot', 'Depot Northgate', 'Southern', 'Ré North'])
    ids.set(await create(words.apiKey, name), name)
  const found = async (q: string) => {
    const res = await gw.call(words.apiKey, { method: 'GET', url: '/v1/sub-accounts', query: { q } })
    return (res.json().data as { id: string }[]).map((s) => ids.get(s.id))
  }
  t.same(await found('north'), ['Warehouse North', 'North-East Depot', 'Depot Northgate', 'Ré North'])
  t.same(await found('NOR'), ['Warehouse North', 'North-East Depot', 'Depot Northgate', 'Ré North'], 'any case')
  t.same(await found('east'), ['North-East Depot'], 'a word after a hyphen')
  t.same(await found('ré'), ['Ré North'], 'a word of any letters')
  t.same(await found('orth'), [], 'the middle of a word is not its start')
  t.same(await found('depot n'), ['Depot Northgate'], 'the start of the name, across words')
  const southern = [...ids].find(([, name]) => name === 'Southern')![0]
  const rename = async (name: string) => {
    const res = await gw.call(words.apiKey, {
      method: 'PATCH',
      url: `/v1/sub-accounts/${southern}`,
      acting: 'self',
      body: { name },
    })
    t.equal(res.statusCode, 200)
  }
  await rename('South North')
  t.ok((await found('north')).includes('Southern'), 'renamed: found by its new words')
  await rename('South')
  t.notOk((await found('north')).includes('Southern'), 'and no longer by its old ones')
})

t.test('q with many matches: every way a page is read gives the same pages', async (t) => {
  // 3,000 sub-accounts: "Shop …" the oldest 1,500 (dense, then none), "… Late" the newest 1,200
  // (more than a few, all far from the oldest), every 7th deactivated.
  const many = await gw.createParent()
  await gw.sql`
    insert into tenants (parent_id, name, status, deactivated_at)
    select ${many.id}, case when i <= 1500 then 'Shop ' || i when i > 1800 then 'Depot ' || i || ' Late' else 'Yard ' || i end,
      case when i % 7 = 0 then 'deactivated' else 'active' end, case when i % 7 = 0 then now() end
    from generate_series(1, 3000) as i`
  await gw.sql`analyze tenants`
  await gw.sql`analyze tenant_name_words`
  const all = await gw.sql<{ id: string; name: string; seq: string; status: string }[]>`
    select id, name, seq::text, status from tenants where parent_id = ${many.id} order by tenants.seq`
  const plans: SearchPlan[] = [{ by: 'window' }, { by: 'order' }, { by: 'walk' }]
  for (const [q, sort, status] of [
    ['shop', 'created_at', null],
    ['late', 'created_at', null],
    ['late', '-created_at', null],
    ['shop', '-created_at', null],
    ['depot', 'created_at', 'active'],
  ] as const) {
    const matching = all.filter(
      (row) =>
        row.name
          .toLowerCase()
          .split(/[^a-z0-9]+/)
          .some((word) => word.startsWith(q)) &&
        (status === null || row.status === status),
    )
    const expected = (sort.startsWith('-') ? [...matching].reverse() : matching).slice(0, 25).map((row) => row.id)
    // The first page and the one after its 10th, as each plan reads them.
    for (const plan of plans) {
      if (plan.by === 'order' && status !== null) continue
      const filter = { limit: 10, afterSeq: null, status, externalId: null, search: q, sort } as const
      const read = async (afterSeq: string | null) => {
        const { s, text } = subAccountPage(many.id, { ...filter, afterSeq }, plan)
        return (await gw.sql.unsafe<{ id: string; seq: string }[]>(text, s.values as never[])).map((row) => row.id)
      }
      const first = await read(null)
      const tenth = all.find((row) => row.id === expected[9])?.seq ?? null
      const window = plan.by === 'window'
      // A window holds only what lies in the next 500: it may find fewer (then the list reads on).
      if (!window || first.length === 10) t.same(first, expected.slice(0, 10), `${q} ${sort} ${status}: ${plan.by}`)
      if (!window && tenth !== null)
        t.same(await read(tenth), expected.slice(10, 20), `${q} ${sort} ${status}: ${plan.by}, the next page`)
    }
    // And through the API, page after page.
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const query: Record<string, string> = { q, sort, limit: '10', ...(status === null ? {} : { status }) }
      if (cursor !== null) query.cursor = cursor
      const res = await gw.call(many.apiKey, { method: 'GET', url: '/v1/sub-accounts', query })
      t.equal(res.statusCode, 200, `${q} ${sort} ${status}: page ${seen.length / 10 + 1}`)
      seen.push(...(res.json().data as { id: string }[]).map((row) => row.id))
      cursor = res.json().next_cursor
    } while (cursor !== null && seen.length < 25)
    t.same(seen.slice(0, 25), expected, `${q} ${sort} ${status}: the API's pages`)
  }
})

t.test('a search counts its matches on its indexes', async (t) => {
  const many = await gw.createParent()
  await gw.sql`
    insert into tenants (parent_id, name, external_id)
    select ${many.id}, 'n' || i || ' word' || i, 'e' || i from generate_series(1, 5000) as i`
  await gw.sql`analyze tenants`
  await gw.sql`analyze tenant_name_words`
  const { s, text } = subAccountSearch(many.id, 'n12')
  const plan = await gw.sql.unsafe(`explain ${text}`, s.values, { prepare: false })
  const lines = plan.map((row) => String(row['QUERY PLAN'])).join('\n')
  t.match(lines, /Index (Only )?Scan (using|on) tenant_name_words_search/, "the words' index")
  t.match(lines, /Index (Only )?Scan (using|on) tenants_parent_lower_name/, 'the name prefix reads its index')
  t.match(
    lines,
    /Index (Only )?Scan (using|on) tenants_parent_lower_external_id/,
    'the external id prefix reads its index',
  )
  t.match(lines, /word ~>=~ 'n12'/, 'as a range of the index, not a filter of every row')
})
