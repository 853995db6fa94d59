// Prepaid credits on the management API (docs/api.md, Credits), over a real socket against a
// gateway on real Postgres and Redis: limits.credits' validation and stored form, a grant's
// validation, GET …/credits' balances and order (the burn order), void, the events, idempotency.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'

const gw = await startGateway(t)
const sql = gw.database.sql
const P = await gw.createParent({ name: 'P' })
const Q = await gw.createParent({ name: 'Q' })

const manage = (key: string, method: string, path: string, json?: unknown, headers: [string, string][] = []) =>
  callAs(gw.url, key, {
    acting: 'self',
    method,
    path: `/v1/sub-accounts${path}`,
    ...(json === undefined ? {} : { json }),
    headers,
  })

async function createSub(body: Record<string, unknown> = {}) {
  const res = await manage(P.apiKey, 'POST', '', { name: 'sub', ...body })
  if (res.status !== 201) throw new Error(`create: ${res.status} ${res.body}`)
  return res.json() as { id: string; limits: Record<string, unknown> }
}

interface Grant {
  id: string
  meter: string
  units: number
  units_left: number
  priority: number
  expires_at: string | null
  voided_at: string | null
  created_at: string
  metadata: Record<string, string>
}

async function grant(subId: string, body: Record<string, unknown>): Promise<Grant> {
  const res = await manage(P.apiKey, 'POST', `/${subId}/credits/grants`, body)
  if (res.status !== 201) throw new Error(`grant: ${res.status} ${res.body}`)
  return res.json() as Grant
}

const inAnHour = () => new Date(Date.now() + 3_600_000).toISOString()

t.test('limits.credits: validated as the other kinds, kept with its threshold filled in', async (t) => {
  const sub = await createSub({ limits: { credits: { tokens: { required: true } } } })
  t.same(sub.limits.credits, { tokens: { required: true, low_threshold_percent: 10 } })
  const [row] = await sql`select limits from tenants where id = ${sub.id}`
  t.same(row!.limits.credits, { tokens: { required: true, low_threshold_percent: 10 } }, 'stored filled in')
  const patched = await manage(P.apiKey, 'PATCH', `/${sub.id}`, {
    limits: { credits: { tokens: { required: true, low_threshold_percent: 25 }, calls: { required: true } } },
  })
  t.equal(patched.status, 200)
  t.same((patched.json() as { limits: { credits: unknown } }).limits.credits, {
    calls: { required: true, low_threshold_percent: 10 },
    tokens: { required: true, low_threshold_percent: 25 },
  })
  const cases: [unknown, string][] = [
    [{ tokens: { required: false } }, '/body/limits/credits/tokens/required'],
    [{ tokens: {} }, '/body/limits/credits/tokens'],
    [{ tokens: { required: true, low_threshold_percent: 0 } }, '/body/limits/credits/tokens/low_threshold_percent'],
    [{ tokens: { required: true, low_threshold_percent: 100 } }, '/body/limits/credits/tokens/low_threshold_percent'],
    [{ tokens: { required: true, extra: 1 } }, '/body/limits/credits/tokens'],
    [{ requests: { required: true } }, '/body/limits/credits/requests'],
  ]
  for (const [credits, path] of cases) {
    const res = await manage(P.apiKey, 'PATCH', `/${sub.id}`, { limits: { credits } })
    t.equal(res.status, 400, JSON.stringify(credits))
    const body = res.json() as { code: string; errors: { path: string }[] }
    t.equal(body.code, 'validation_failed')
    t.ok(
      body.errors.some((e) => e.path.startsWith(path)),
      `${JSON.stringify(credits)} names ${path}: ${res.body}`,
    )
  }
  const [after] = await sql`select limits from tenants where id = ${sub.id}`
  t.same(Object.keys(after!.limits.credits), ['calls', 'tokens'], 'nothing changed by a refusal')
  const cleared = await manage(P.apiKey, 'PATCH', `/${sub.id}`, { limits: { rate: null } })
  t.notOk((cleared.json() as { limits: Record<string, unknown> }).limits.credits, 'PATCH replaces the whole object')
})

t.test('a grant: 201 as the API shows it, its validation, 404 for another parent', async (t) => {
  const sub = await createSub()
  const expiresAt = inAnHour()
  const res = await manage(P.apiKey, 'POST', `/${sub.id}/credits/grants`, {
    meter: 'tokens',
    units: 1000,
    expires_at: expiresAt,
    metadata: { invoice: 'in_1' },
  })
  t.equal(res.status, 201)
  const made = res.json() as Grant
  t.match(res.headers.location, `/v1/sub-accounts/${sub.id}/credits/grants/${made.id}`)
  t.same(Object.keys(made).sort(), [
    'created_at',
    'expires_at',
    'id',
    'metadata',
    'meter',
    'priority',
    'units',
    'units_left',
    'voided_at',
  ])
  t.match(made, { meter: 'tokens', units: 1000, units_left: 1000, priority: 100, voided_at: null })
  t.equal(made.expires_at, new Date(expiresAt).toISOString())
  t.same(made.metadata, { invoice: 'in_1' })

  const [before] = await sql`select count(*)::int as n from credit_grants where sub_account_id = ${sub.id}`
  const bad: [unknown, string][] = [
    [{ units: 5 }, '/body'],
    [{ meter: 'tokens' }, '/body'],
    [{ meter: 'tokens', units: 0 }, '/body/units'],
    [{ meter: 'tokens', units: 1_000_000_000_001 }, '/body/units'],
    [{ meter: 'tokens', units: 1.5 }, '/body/units'],
    [{ meter: 'Tokens', units: 5 }, '/body/meter'],
    [{ meter: 'requests', units: 5 }, '/body/meter'],
    [{ meter: 'tokens', units: 5, priority: -1 }, '/body/priority'],
    [{ meter: 'tokens', units: 5, priority: 1001 }, '/body/priority'],
    [{ meter: 'tokens', units: 5, expires_at: 'tomorrow' }, '/body/expires_at'],
    [{ meter: 'tokens', units: 5, expires_at: new Date(Date.now() - 1000).toISOString() }, '/body/expires_at'],
    [{ meter: 'tokens', units: 5, color: 'red' }, '/body'],
  ]
  for (const [body, path] of bad) {
    const refused = await manage(P.apiKey, 'POST', `/${sub.id}/credits/grants`, body)
    t.equal(refused.status, 400, JSON.stringify(body))
    const problem = refused.json() as { code: string; errors: { path: string }[] }
    t.equal(problem.code, 'validation_failed')
    t.ok(
      problem.errors.some((e) => e.path.startsWith(path)),
      `${JSON.stringify(body)} names ${path}: ${refused.body}`,
    )
  }
  const [after] = await sql`select count(*)::int as n from credit_grants where sub_account_id = ${sub.id}`
  t.equal(after!.n, before!.n, 'nothing written by a refusal')

  const other = await manage(Q.apiKey, 'POST', `/${sub.id}/credits/grants`, { meter: 'tokens', units: 5 })
  t.equal(other.status, 404, "another parent's sub-account is not found")
  t.equal((await manage(Q.apiKey, 'GET', `/${sub.id}/credits`)).status, 404)
  t.equal((await manage(Q.apiKey, 'POST', `/${sub.id}/credits/grants/${made.id}/void`)).status, 404)
  t.equal((await manage(P.apiKey, 'GET', '/not-a-uuid/credits')).status, 404)
})

t.test('GET …/credits: balances by meter, live grants in burn order, then the rest', async (t) => {
  const sub = await createSub({ limits: { credits: { calls: { required: true } } } })
  const later = new Date(Date.now() + 7_200_000).toISOString()
  const oldest = await grant(sub.id, { meter: 'tokens', units: 10 })
  const soonest = await grant(sub.id, { meter: 'tokens', units: 20, expires_at: inAnHour() })
  const first = await grant(sub.id, { meter: 'tokens', units: 30, priority: 5, expires_at: later })
  const newest = await grant(sub.id, { meter: 'tokens', units: 40 })
  const laterExpiry = await grant(sub.id, { meter: 'tokens', units: 50, expires_at: later })
  const voided = await grant(sub.id, { meter: 'tokens', units: 60 })
  const images = await grant(sub.id, { meter: 'images', units: 7 })
  t.equal((await manage(P.apiKey, 'POST', `/${sub.id}/credits/grants/${voided.id}/void`)).status, 200)
  // An expired grant: made live, then its expiry passed (the API refuses a past one).
  const expired = await grant(sub.id, { meter: 'tokens', units: 80, expires_at: inAnHour() })
  await sql`update credit_grants set expires_at = now() - interval '1 second' where id = ${expired.id}`

  const res = await manage(P.apiKey, 'GET', `/${sub.id}/credits`)
  t.equal(res.status, 200)
  const body = res.json() as { balances: { meter: string; units_left: number }[]; grants: Grant[] }
  t.same(body.balances, [
    { meter: 'calls', units_left: 0 },
    { meter: 'images', units_left: 7 },
    { meter: 'tokens', units_left: 10 + 20 + 30 + 40 + 50 },
  ])
  const order = body.grants.map((g) => g.id)
  const tokens = order.filter((id) => id !== images.id)
  t.same(
    tokens,
    [first.id, soonest.id, laterExpiry.id, oldest.id, newest.id, expired.id, voided.id],
    'priority, then soonest expiry, then oldest; then expired and voided, newest first',
  )
  const shown = new Map(body.grants.map((g) => [g.id, g]))
  t.equal(shown.get(voided.id)!.units_left, 0, "a voided grant's rest is gone")
  t.ok(shown.get(voided.id)!.voided_at)
  t.equal(shown.get(expired.id)!.units_left, 0, "an expired grant's rest is gone")
})

t.test('void: 200 with voided_at, repeat harmless, one credits.voided event', async (t) => {
  const sub = await createSub()
  const made = await grant(sub.id, { meter: 'tokens', units: 100 })
  const first = await manage(P.apiKey, 'POST', `/${sub.id}/credits/grants/${made.id}/void`)
  t.equal(first.status, 200)
  const voided = first.json() as Grant
  t.equal(voided.units_left, 0)
  t.ok(voided.voided_at)
  const again = await manage(P.apiKey, 'POST', `/${sub.id}/credits/grants/${made.id}/void`)
  t.equal(again.status, 200)
  t.equal((again.json() as Grant).voided_at, voided.voided_at, 'voided once')
  const unknown = await manage(P.apiKey, 'POST', `/${sub.id}/credits/grants/${crypto.randomUUID()}/void`)
  t.equal(unknown.status, 404)
  t.match(unknown.json(), { code: 'not_found', detail: /credit grant/ })

  const events = await sql<
    { type: string; target: { type: string; id: string }; data: { object: unknown; previous: unknown } }[]
  >`
    select type, target, data from events where account_id = ${P.id} and target->>'id' = ${made.id}
    order by id`
  t.same(
    events.map((e) => e.type),
    ['credits.granted', 'credits.voided'],
    'one event each; the repeat wrote none',
  )
  t.same(events[0]!.target, { type: 'credit_grant', id: made.id })
  t.match(events[0]!.data.object, { id: made.id, sub_account_id: sub.id, units: 100, units_left: 100 })
  t.equal(events[0]!.data.previous, null)
  t.match(events[1]!.data.object, { id: made.id, units_left: 0, voided_at: voided.voided_at })
  t.same(events[1]!.data.previous, { units_left: 100, voided_at: null })
  const listed = await manage(P.apiKey, 'GET', `/events?type=credits.*&target_id=${made.id}`)
  t.equal(listed.status, 200)
  t.equal((listed.json() as { data: unknown[] }).data.length, 2, 'in the audit log')
})

t.test('Idempotency-Key: a grant made once, the answer replayed', async (t) => {
  const sub = await createSub()
  const body = { meter: 'tokens', units: 5 }
  const key: [string, string] = ['Idempotency-Key', `credits-${crypto.randomUUID()}`]
  const first = await manage(P.apiKey, 'POST', `/${sub.id}/credits/grants`, body, [key])
  const second = await manage(P.apiKey, 'POST', `/${sub.id}/credits/grants`, body, [key])
  t.equal(first.status, 201)
  t.equal(second.status, 201)
  t.equal(second.headers['idempotent-replayed'], 'true')
  t.equal((second.json() as Grant).id, (first.json() as Grant).id)
  const [row] = await sql`select count(*)::int as n from credit_grants where sub_account_id = ${sub.id}`
  t.equal(row!.n, 1)
})
