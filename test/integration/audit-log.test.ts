// The audit log, GET /v1/sub-accounts/events (docs/api.md, Audit log): a parent's own events,
// newest first, filtered by type (or a type's resource), target and time, paged with signed
// cursors.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

const gw = await startGateway(t, { listen: false })
const parent = await gw.createParent()
const other = await gw.createParent({ name: 'other' })
const sql = gw.sql

const as = (apiKey: string, method: 'GET' | 'POST' | 'PATCH', url: string, body?: unknown) =>
  gw.call(apiKey, { method, url, acting: 'self', body })
const log = async (query = '', apiKey = parent.apiKey) => {
  const res = await as(apiKey, 'GET', `/v1/sub-accounts/events${query}`)
  if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${res.body}`)
  return res.json()
}

// A history: two sub-accounts, a key, changes of each.
const a = (await as(parent.apiKey, 'POST', '/v1/sub-accounts', { name: 'a' })).json()
const b = (await as(parent.apiKey, 'POST', '/v1/sub-accounts', { name: 'b' })).json()
await as(parent.apiKey, 'PATCH', `/v1/sub-accounts/${a.id}`, { name: 'a2' })
const key = (
  await as(parent.apiKey, 'POST', `/v1/sub-accounts/${a.id}/api-keys`, { name: 'k', scopes: ['x:y'] })
).json()
await as(parent.apiKey, 'POST', `/v1/sub-accounts/${a.id}/api-keys/${key.id}/revoke`)
await as(parent.apiKey, 'POST', `/v1/sub-accounts/${b.id}/deactivate`)
await as(other.apiKey, 'POST', '/v1/sub-accounts', { name: 'not yours' })

const ALL = [
  'sub_account.deactivated',
  'api_key.revoked',
  'api_key.created',
  'sub_account.updated',
  'sub_account.created',
  'sub_account.created',
]

t.test('newest first, the parent own events only, each as stored', async (t) => {
  const page = await log()
  t.same(
    page.data.map((e: { type: string }) => e.type),
    ALL,
  )
  t.equal(page.next_cursor, null)
  t.ok(
    page.data.every((e: { account_id: string }) => e.account_id === parent.id),
    'all the parent own',
  )
  t.match(page.data[0], {
    id: /^evt_/,
    actor: { type: 'api_key', key_id: parent.keyId },
    target: { type: 'sub_account', id: b.id },
    request_id: /\S/,
    source_ip: '127.0.0.1',
    data: { object: { id: b.id, status: 'deactivated' }, previous: { status: 'active', deactivated_at: null } },
  })
  const theirs = await log('', other.apiKey)
  t.same(
    theirs.data.map((e: { type: string; data: { object: { name: string } } }) => [e.type, e.data.object.name]),
    [['sub_account.created', 'not yours']],
  )
})

t.test('filters: type, type.*, target_id, since and until', async (t) => {
  const types = async (query: string) => (await log(query)).data.map((e: { type: string }) => e.type)
  t.same(await types('?type=sub_account.created'), ['sub_account.created', 'sub_account.created'])
  t.same(await types('?type=api_key.*'), ['api_key.revoked', 'api_key.created'])
  t.same(await types(`?target_id=${a.id}`), ['sub_account.updated', 'sub_account.created'])
  t.same(await types(`?target_id=${key.id}&type=api_key.revoked`), ['api_key.revoked'])
  t.same(await types('?type=account.*'), [])

  const [first] = await sql`select min(created_at) as at from events where account_id = ${parent.id}`
  await sql`update events set created_at = created_at - interval '1 hour'
            where account_id = ${parent.id} and type = 'sub_account.created'`
  const at = (first!.at as Date).toISOString()
  t.same(await types(`?until=${encodeURIComponent(at)}`), ['sub_account.created', 'sub_account.created'], 'until')
  t.same(await types(`?since=${encodeURIComponent(at)}`), ALL.slice(0, 4), 'since')
  const later = new Date(Date.now() + 60_000).toISOString()
  t.same(await types(`?since=${later}`), [], 'nothing since a minute from now')
})

t.test('refusals: unknown type, since after until, bad cursor, another list or parent cursor', async (t) => {
  const refused = async (query: string, apiKey = parent.apiKey) => {
    const res = await as(apiKey, 'GET', `/v1/sub-accounts/events${query}`)
    t.equal(res.statusCode, 400, `${query}: ${res.body}`)
    t.equal(problemOf(res).code, 'validation_failed')
  }
  for (const query of [
    '?type=api_key.deleted',
    '?type=nothing.*',
    '?type=api_key',
    '?since=yesterday',
    '?since=2016-12-31T23:59:60Z',
    '?since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z',
    '?limit=0',
    '?limit=101',
    '?cursor=not-a-cursor',
    '?unknown=1',
  ])
    await refused(query)
  const subAccounts = await as(parent.apiKey, 'GET', '/v1/sub-accounts?limit=1')
  await refused(`?cursor=${subAccounts.json().next_cursor}`)
  const page = await log('?limit=1')
  await refused(`?cursor=${page.next_cursor}`, other.apiKey)
})

t.test('paging: every event once, newest first, with a filter kept', async (t) => {
  const seen: string[] = []
  let cursor: string | null = null
  do {
    const page: { data: { id: string; type: string }[]; next_cursor: string | null } = await log(
      `?limit=2${cursor === null ? '' : `&cursor=${cursor}`}`,
    )
    t.ok(page.data.length <= 2)
    seen.push(...page.data.map((e) => e.type))
    cursor = page.next_cursor
  } while (cursor !== null)
  t.same(seen, ALL)
  const created = await log('?type=sub_account.created&limit=1')
  const next = await log(`?type=sub_account.created&limit=1&cursor=${created.next_cursor}`)
  t.same([created.data[0].target.id, next.data[0].target.id], [b.id, a.id])
  t.equal(next.next_cursor, null)
})

t.test('newest first by seq as a number: past 9, 10 is newer', async (t) => {
  // seq is read as text (`seq::text as seq`); the order must still be the column's, or '9' sorts
  // above '10' and a page's cursor (seq < the last one shown) skips the newest events.
  for (const n of [1, 2, 3, 4, 5, 6]) await as(parent.apiKey, 'POST', '/v1/sub-accounts', { name: `more ${n}` })
  const stored = (
    await sql<{ id: string }[]>`
    select id from events where account_id = ${parent.id} order by seq desc`
  ).map((row) => row.id)
  const [{ top }] = (await sql`select max(seq)::int as top from events`) as [{ top: number }]
  t.ok(top >= 10, `the log's seq went past 9 (${top})`)
  t.same(
    (await log('?limit=100')).data.map((e: { id: string }) => e.id),
    stored,
    'one page',
  )
  const seen: string[] = []
  let cursor: string | null = null
  do {
    const page: { data: { id: string }[]; next_cursor: string | null } = await log(
      `?limit=3${cursor === null ? '' : `&cursor=${cursor}`}`,
    )
    seen.push(...page.data.map((e) => e.id))
    cursor = page.next_cursor
  } while (cursor !== null)
  t.same(seen, stored, 'paged: every event once, newest first')
})
