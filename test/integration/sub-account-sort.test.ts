// The sub-accounts list's `sort` and `include` (docs/api.md, Sub-accounts), on the real Postgres:
// each order paged to the end with small pages never skips or repeats a row (equal names
// included), a cursor of one sort is refused under another with a 400 that names its sort, the
// default answer keeps its shape, and the figures count active keys and this month's forwarded
// requests.
import t from 'tap'
import { monthOf } from '../../src/limits/month.js'
import { addUsage } from '../../src/store/usage.js'
import { utcDay } from '../../src/usage/meter.js'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

const gw = await startGateway(t, { listen: false, redis: false })
const parent = await gw.createParent()
const stranger = await gw.createParent()

async function create(key: string, name: string): Promise<string> {
  const res = await gw.call(key, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name } })
  if (res.statusCode !== 201) throw new Error(`setup: ${res.statusCode} ${res.body}`)
  return res.json().id as string
}

// Made in this order (created_at and seq follow it); names chosen to sort the same in any
// locale once lower-cased, with two "bravo"s of different case to test the tie on seq.
const made: { id: string; name: string }[] = []
for (const name of ['delta', 'Bravo', 'alpha', 'echo', 'bravo', 'Charlie', 'foxtrot']) {
  made.push({ id: await create(parent.apiKey, name), name })
}
await create(stranger.apiKey, 'aardvark (not ours)')

async function list(query: Record<string, string>) {
  const res = await gw.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts', query })
  return { status: res.statusCode, body: res.json(), res }
}

/** Every page of one sort, `limit` at a time: the names in the order read. */
async function readAll(query: Record<string, string>, limit = 2): Promise<string[]> {
  const names: string[] = []
  let cursor: string | null = null
  for (let pages = 0; pages < 20; pages++) {
    const { status, body } = await list({ ...query, limit: String(limit), ...(cursor === null ? {} : { cursor }) })
    if (status !== 200) throw new Error(`page: ${status} ${JSON.stringify(body)}`)
    names.push(...body.data.map((s: { name: string }) => s.name))
    cursor = body.next_cursor
    if (cursor === null) return names
  }
  throw new Error('never reached the last page')
}

const nameOf = (id: string) => made.find((m) => m.id === id)!.name

t.test('each sort, paged two at a time, lists every sub-account once in its order', async (t) => {
  const oldest = made.map((m) => m.name)
  t.same(await readAll({}), oldest, 'no sort: oldest first, as before')
  t.same(await readAll({ sort: 'created_at' }), oldest, 'created_at: the same')
  t.same(await readAll({ sort: '-created_at' }), [...oldest].reverse(), '-created_at: newest first')
  // Equal names (any case): oldest first by name, newest first by -name.
  const byName = ['alpha', 'Bravo', 'bravo', 'Charlie', 'delta', 'echo', 'foxtrot']
  t.same(await readAll({ sort: 'name' }), byName, 'name: any case, equal names oldest first')
  t.same(await readAll({ sort: '-name' }), [...byName].reverse(), '-name: the reverse')
  for (const limit of [1, 3, 100]) {
    t.same(await readAll({ sort: 'name' }, limit), byName, `name, ${limit} a page`)
  }
})

t.test('a sort with the filters', async (t) => {
  t.same(await readAll({ sort: 'name', q: 'b' }), ['Bravo', 'bravo'], 'a search sorted by name')
  const echo = made.find((m) => m.name === 'echo')!.id
  const res = await gw.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${echo}/deactivate`,
    acting: 'self',
  })
  t.equal(res.statusCode, 200)
  t.same(
    await readAll({ sort: '-name', status: 'active' }),
    ['foxtrot', 'delta', 'Charlie', 'bravo', 'Bravo', 'alpha'],
    'active ones, by name descending',
  )
  t.same(await readAll({ sort: '-created_at', status: 'deactivated' }), ['echo'])
})

t.test('a cursor pages only the sort it came from', async (t) => {
  const byName = await list({ sort: 'name', limit: '2' })
  const oldest = await list({ limit: '2' })
  const newest = await list({ sort: '-created_at', limit: '2' })
  const cases = [
    { cursor: byName.body.next_cursor, from: 'name', under: ['created_at', '-created_at', '-name', ''] },
    { cursor: oldest.body.next_cursor, from: 'created_at', under: ['name', '-name', '-created_at'] },
    { cursor: newest.body.next_cursor, from: '-created_at', under: ['name', 'created_at', ''] },
  ]
  for (const { cursor, from, under } of cases) {
    for (const sort of under) {
      const res = await list({ cursor, limit: '2', ...(sort === '' ? {} : { sort }) })
      t.equal(res.status, 400, `${from}'s cursor under sort=${sort || '(none)'}`)
      const body = problemOf(res.res)
      t.equal(body.code, 'validation_failed')
      t.equal(body.errors?.[0]?.path, '/querystring/cursor')
      t.match(body.errors?.[0]?.message, `pages the list with sort=${from}, not sort=${sort || 'created_at'}`)
      t.match(body.errors?.[0]?.message, /leave the cursor out/)
    }
  }
  // The same cursor under its own sort goes on; a cursor with other filters is still refused.
  t.equal((await list({ cursor: byName.body.next_cursor, sort: 'name', limit: '2' })).status, 200)
  const filtered = await list({ cursor: byName.body.next_cursor, sort: 'name', q: 'b' })
  t.equal(filtered.status, 400)
  t.match(problemOf(filtered.res).errors?.[0]?.message, 'is not a cursor issued by this API')
  // Another parent's name cursor is refused like a forged one.
  const theirs = await gw.call(stranger.apiKey, {
    method: 'GET',
    url: '/v1/sub-accounts',
    query: { sort: 'name', limit: '1' },
  })
  t.equal(theirs.json().next_cursor, null, 'the stranger has one sub-account')
  const forged = `${byName.body.next_cursor.slice(0, -2)}AA`
  t.equal((await list({ cursor: forged, sort: 'name' })).status, 400, 'a name cursor changed by hand')
})

t.test('bad sort and include values are 400s naming the parameter', async (t) => {
  for (const [query, path] of [
    [{ sort: 'updated_at' }, '/querystring/sort'],
    [{ sort: 'Name' }, '/querystring/sort'],
    [{ include: 'keys' }, '/querystring/include'],
    [{ include: 'key_count,' }, '/querystring/include'],
  ] as const) {
    const res = await list(query)
    t.equal(res.status, 400, JSON.stringify(query))
    t.ok(
      problemOf(res.res).errors?.some((e) => e.path.startsWith(path)),
      `${JSON.stringify(query)}: names ${path}`,
    )
  }
})

t.test('include: key_count and usage_this_month; absent, the objects are as before', async (t) => {
  const [first, second] = made
  // Two keys for the first: one stays active, one is revoked; one expired key for the second.
  const mint = async (subId: string, body: Record<string, unknown>) => {
    const res = await gw.call(parent.apiKey, {
      method: 'POST',
      url: `/v1/sub-accounts/${subId}/api-keys`,
      acting: 'self',
      body: { name: 'k', scopes: ['orders:read'], ...body },
    })
    t.equal(res.statusCode, 201)
    return res.json().id as string
  }
  await mint(first!.id, {})
  const revoked = await mint(first!.id, {})
  await gw.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${first!.id}/api-keys/${revoked}/revoke`,
    acting: 'self',
  })
  const expiring = await mint(second!.id, {})
  await gw.sql`update api_keys set expires_at = now() - interval '1 minute' where id = ${expiring}`
  // This month: 5 forwarded of 7 requests; last month's 100 are not this month's.
  const today = utcDay(Date.now())
  const lastMonth = new Date(Date.now())
  lastMonth.setUTCDate(0)
  await addUsage(gw.sql, '11111111-1111-4111-8111-111111111111', {
    counts: [
      { tenantId: first!.id, day: today, statusClass: 2, requests: 5, forwarded: 5 },
      { tenantId: first!.id, day: today, statusClass: 4, requests: 2, forwarded: 0 },
      { tenantId: first!.id, day: utcDay(lastMonth.getTime()), statusClass: 2, requests: 100, forwarded: 100 },
    ],
    // Their request units, which the figure counts (as a quota does).
    unitCounts: [
      { tenantId: first!.id, periodStart: `${today}T00:00:00.000Z`, meter: 'requests', units: 5, requests: 5 },
      {
        tenantId: first!.id,
        periodStart: `${utcDay(lastMonth.getTime())}T00:00:00.000Z`,
        meter: 'requests',
        units: 100,
        requests: 100,
      },
    ],
  })

  const plain = await list({ limit: '3' })
  t.same(
    Object.keys(plain.body.data[0]).sort(),
    [
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
    ],
    'no include: the fields of the contract only',
  )
  const both = await list({ limit: '3', include: 'key_count,usage_this_month' })
  t.equal(both.status, 200)
  const figures = Object.fromEntries(
    both.body.data.map((s: { id: string; key_count: number; usage_this_month: number }) => [
      nameOf(s.id),
      [s.key_count, s.usage_this_month],
    ]),
  )
  t.same(figures, { delta: [1, 5], Bravo: [0, 0], alpha: [0, 0] }, 'active keys; forwarded requests of this month')
  const one = await list({ limit: '1', include: 'usage_this_month' })
  t.same(Object.keys(one.body.data[0]).includes('key_count'), false, 'only what was asked for')
  t.equal(one.body.data[0].usage_this_month, 5)

  const get = await gw.call(parent.apiKey, {
    method: 'GET',
    url: `/v1/sub-accounts/${first!.id}`,
    query: { include: 'key_count,usage_this_month' },
  })
  t.equal(get.statusCode, 200)
  t.equal(get.json().key_count, 1, 'GET one: key_count')
  t.equal(get.json().usage_this_month, 5, `GET one: usage_this_month (${monthOf(Date.now())})`)
  const getPlain = await gw.call(parent.apiKey, {
    method: 'GET',
    url: `/v1/sub-accounts/${first!.id}`,
    query: { unknown: 'ignored, as before' },
  })
  t.equal(getPlain.statusCode, 200, 'GET one still ignores a parameter it does not know')
  t.equal('key_count' in getPlain.json(), false)
  const badGet = await gw.call(parent.apiKey, {
    method: 'GET',
    url: `/v1/sub-accounts/${first!.id}`,
    query: { include: 'everything' },
  })
  t.equal(badGet.statusCode, 400)
  t.equal(problemOf(badGet).errors?.[0]?.path, '/querystring/include')
})
