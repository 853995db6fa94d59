// Importing keys from elsewhere (docs/key-imports.md; docs/api.md, Importing keys): an ndjson body,
// an ndjson answer a line per input line, then a summary. An imported key, in its own format,
// authenticates, expires, rolls and revokes as a minted one on every replica. Two replicas (A and
// B) share Postgres and a Redis prefix and keep records in-process for a minute, so that only the
// import's or the revocation's own message can change B's answer.
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import t from 'tap'
import { startGateway, startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { checkProblem } from '../helpers/problems.js'
import { redisClient, untilSubscribed } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

const SLOW_LOCAL_EXPIRY = { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 }

const upstream = await startUpstream(t)
const [a, b] = (await startReplicas(t, 2, { upstreamUrl: upstream.url, cacheTimings: SLOW_LOCAL_EXPIRY })) as [
  TestGateway,
  TestGateway,
]
const sql = a.database.sql
const parent = await a.createParent()
const other = await a.createParent({ name: 'another parent' })
await untilSubscribed(redisClient(t), a.redisKeyPrefix!, 2)

const manage = (method: 'GET' | 'POST', url: string, body?: unknown, apiKey = parent.apiKey) =>
  a.call(apiKey, { method, url: `/v1/sub-accounts${url}`, acting: 'self', body })

async function newSub(externalId?: string, apiKey = parent.apiKey): Promise<string> {
  const res = await manage('POST', '', { name: 'imported', ...(externalId ? { external_id: externalId } : {}) }, apiKey)
  return res.json().id
}

interface Answer {
  res: RawResponse
  lines: { line: number; status: string; key_id?: string; error?: string }[]
  summary: { lines: number; imported: number; exists: number; invalid: number; dry_run: boolean } | undefined
}

async function importKeys(body: string, query = '', apiKey = parent.apiKey, gw = a): Promise<Answer> {
  const res = await callAs(gw.url, apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/api-keys/imports${query}`,
    acting: 'self',
    headers: [['Content-Type', 'application/x-ndjson']],
    body,
  })
  const parsed =
    res.status === 200
      ? res.body
          .trimEnd()
          .split('\n')
          .map((l) => JSON.parse(l))
      : []
  const last = parsed.at(-1)
  return { res, lines: last?.summary ? parsed.slice(0, -1) : parsed, summary: last?.summary }
}

const ndjson = (lines: unknown[]) => `${lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n')}\n`
const proxied = (gw: TestGateway, apiKey: string) => callAs(gw.url, apiKey, { path: '/v1/orders' })
const foreignKey = (prefix: string) => `${prefix}${randomBytes(18).toString('base64url')}`
const countKeys = async () => (await sql`select count(*)::int as n from api_keys`)[0]!.n as number
const sha256 = (value: string) => createHash('sha256').update(value).digest()

t.test('keys in three forms import, authenticate on both replicas, and show as imported', async (t) => {
  const ext = `ext-${randomUUID()}`
  const subId = await newSub(ext)
  const kong = foreignKey('kong-') // the value itself
  const aws = foreignKey('') // its SHA-256 in hex
  const unkey = foreignKey('uk_') // its SHA-256 in base64, as Unkey exports it
  // Tried before its import: B keeps it as unknown, until the import's message.
  checkProblem(t, await proxied(b, kong), 401, 'unauthenticated', 'unknown before its import')
  const { res, lines, summary } = await importKeys(
    ndjson([
      { sub_account_id: subId, name: 'kong', scopes: ['orders:read'], key: kong },
      { external_id: ext, name: 'aws', scopes: ['orders:read'], key_sha256: sha256(aws).toString('hex') },
      { sub_account_id: subId, name: 'unkey', scopes: ['orders:read'], key_sha256: sha256(unkey).toString('base64') },
    ]),
  )
  t.equal(res.status, 200, res.body.slice(0, 300))
  t.match(res.headers['content-type'], /^application\/x-ndjson/)
  t.same(
    lines.map((l) => [l.line, l.status]),
    [
      [1, 'imported'],
      [2, 'imported'],
      [3, 'imported'],
    ],
  )
  t.ok(
    lines.every((l) => typeof l.key_id === 'string'),
    'each with its key id',
  )
  t.same(summary, { lines: 3, imported: 3, exists: 0, invalid: 0, dry_run: false })
  for (const [gw, name] of [
    [a, 'A'],
    [b, 'B'],
  ] as const) {
    for (const key of [aws, unkey]) t.equal((await proxied(gw, key)).status, 200, `${name}: an imported key works`)
    const took = await eventually(1_000, async () => (await proxied(gw, kong)).status === 200)
    t.not(took, null, `${name}: the key tried before its import works once imported`)
  }
  const listed = (await manage('GET', `/${subId}/api-keys`)).json().data as Record<string, unknown>[]
  t.same(
    listed.map((k) => [k.name, k.origin, k.prefix]),
    [
      ['kong', 'imported', 'kong'],
      ['aws', 'imported', ''],
      ['unkey', 'imported', ''],
    ],
  )
  const [stored] = await sql`select count(*)::int as n from api_keys where key_digest = ${sha256(kong)}`
  t.equal(stored!.n, 1, 'stored by its SHA-256')
  const events = await sql`select data from events where account_id = ${parent.id} and type = 'api_key.created'
    and target ->> 'id' = ${lines[0]!.key_id!}`
  t.equal(events.length, 1, 'api_key.created recorded')
  t.match(events[0]!.data, { object: { origin: 'imported', prefix: 'kong', sub_account_id: subId } })

  const before = await countKeys()
  const again = await importKeys(
    ndjson([
      { sub_account_id: subId, name: 'kong', scopes: ['orders:read'], key: kong },
      { external_id: ext, name: 'aws', scopes: ['orders:read'], key_sha256: sha256(aws).toString('hex') },
      { sub_account_id: subId, name: 'unkey', scopes: ['orders:read'], key_sha256: sha256(unkey).toString('base64') },
    ]),
  )
  t.same(
    again.lines.map((l) => [l.status, l.key_id]),
    lines.map((l) => ['exists', l.key_id]),
    'the same file again: each key exists, with its id',
  )
  t.same(again.summary, { lines: 3, imported: 0, exists: 3, invalid: 0, dry_run: false })
  t.equal(await countKeys(), before, 'nothing imported twice')
})

t.test('2,500 lines: written in batches, a repeat across batches is exists with its id', async (t) => {
  const subId = await newSub()
  const keys = Array.from({ length: 2_400 }, (_, i) => foreignKey(`bulk${i}-`))
  const lines: unknown[] = keys.map((key, i) => ({
    sub_account_id: subId,
    name: `k${i}`,
    scopes: ['orders:read'],
    key,
  }))
  // Lines 2,401 to 2,500 repeat keys of the first batch.
  for (let i = 0; i < 100; i++)
    lines.push({ sub_account_id: subId, name: 'again', scopes: ['orders:read'], key: keys[i] })
  const started = performance.now()
  const { res, lines: answered, summary } = await importKeys(ndjson(lines))
  const took = performance.now() - started
  t.equal(res.status, 200, res.body.slice(0, 200))
  t.same(summary, { lines: 2_500, imported: 2_400, exists: 100, invalid: 0, dry_run: false })
  t.same(
    answered.map((l) => l.line),
    Array.from({ length: 2_500 }, (_, i) => i + 1),
    'every line answered, in order',
  )
  t.same(
    answered.slice(2_400).map((l) => l.key_id),
    answered.slice(0, 100).map((l) => l.key_id),
    'each repeat names the key its first line made',
  )
  const [row] = await sql`select count(*)::int as n from api_keys where tenant_id = ${subId}`
  t.equal(row!.n, 2_400)
  t.comment(`2,500 lines imported in ${took.toFixed(0)} ms`)
})

t.test('dry_run checks every line and writes nothing', async (t) => {
  const subId = await newSub()
  const key = foreignKey('dry-')
  const before = await countKeys()
  const { res, lines, summary } = await importKeys(
    ndjson([
      { sub_account_id: subId, name: 'one', scopes: ['orders:read'], key },
      { sub_account_id: subId, name: 'again', scopes: ['orders:read'], key },
      { sub_account_id: subId, name: 'bad', scopes: ['orders:read'] },
    ]),
    '?dry_run=true',
  )
  t.equal(res.status, 200)
  t.same(
    lines.map((l) => l.status),
    ['imported', 'exists', 'invalid'],
  )
  t.same(summary, { lines: 3, imported: 1, exists: 1, invalid: 1, dry_run: true })
  t.equal(await countKeys(), before, 'nothing written')
  checkProblem(t, await proxied(a, key), 401, 'unauthenticated', 'the key was not imported')
})

t.test('invalid lines say why; the valid lines around them import', async (t) => {
  const subId = await newSub()
  const otherSub = await newSub(undefined, other.apiKey)
  const good = foreignKey('good-')
  const base = { sub_account_id: subId, name: 'x', scopes: ['orders:read'] }
  const taken = foreignKey('taken-')
  t.equal(
    (await importKeys(ndjson([{ ...base, sub_account_id: otherSub, key: taken }]), '', other.apiKey)).summary?.imported,
    1,
    'another parent has a key',
  )
  const cases: [unknown, RegExp][] = [
    [base, /exactly one of key .* or key_sha256/],
    [{ ...base, key: good, key_sha256: sha256(good).toString('hex') }, /exactly one of key/],
    [{ ...base, key: 'short' }, /16 to 256 printable ASCII/],
    [{ ...base, key: 'has a space in it, no' }, /16 to 256 printable ASCII/],
    [{ ...base, key: `tgw_${'A'.repeat(49)}` }, /gateway's own prefixes/],
    [{ ...base, key_sha256: 'abc' }, /SHA-256 digest/],
    [{ ...base, sub_account_id: otherSub, key: foreignKey('theirs-') }, /no such sub-account/],
    [{ ...base, sub_account_id: randomUUID(), key: foreignKey('none-') }, /no such sub-account/],
    [{ ...base, external_id: 'x', key: foreignKey('both-') }, /exactly one of sub_account_id or external_id/],
    [{ ...base, scopes: ['sub_accounts:write'], key: foreignKey('mgmt-') }, /for parent keys only/],
    [{ ...base, expires_at: '2020-01-01T00:00:00Z', key: foreignKey('old-') }, /expires_at must be in the future/],
    [{ ...base, key: taken }, /another account has a key with this value/],
    [{ ...base, extra: 1, key: foreignKey('extra-') }, /additional properties/],
    ['{not json', /not JSON/],
    ['[1]', /not a JSON object/],
    ['', /an empty line/],
  ]
  const before = await countKeys()
  const { res, lines, summary } = await importKeys(
    ndjson([...cases.map(([line]) => line), { ...base, name: 'good', key: good }]),
  )
  t.equal(res.status, 200, res.body.slice(0, 300))
  cases.forEach(([, error], i) => {
    t.equal(lines[i]!.status, 'invalid', `line ${i + 1} invalid`)
    t.match(lines[i]!.error, error, `line ${i + 1}: ${lines[i]!.error}`)
    t.equal(lines[i]!.key_id, undefined)
  })
  t.equal(lines.at(-1)!.status, 'imported', 'the good line imports')
  t.same(summary, { lines: cases.length + 1, imported: 1, exists: 0, invalid: cases.length, dry_run: false })
  t.equal(await countKeys(), before + 1, 'only the good key written')
})

t.test("a sub-account on a plan: its plan's key policy holds an import as it holds a mint", async (t) => {
  const plan = await manage('POST', '/plans', {
    name: 'strict keys',
    key_policy: { allowed_scopes: ['orders:read'], max_ttl_seconds: 3600 },
  })
  t.equal(plan.statusCode, 201, plan.body)
  const onPlan = (await manage('POST', '', { name: 'on a plan', plan_id: plan.json().id })).json().id as string
  const minted = await manage('POST', `/${onPlan}/api-keys`, { name: 'm', scopes: ['orders:write'] })
  t.equal(minted.statusCode, 400, 'a mint outside the plan is refused')
  const inAnHour = new Date(Date.now() + 1_800_000).toISOString()
  const base = { sub_account_id: onPlan, name: 'x' }
  const { lines, summary } = await importKeys(
    ndjson([
      { ...base, scopes: ['orders:write'], expires_at: inAnHour, key: foreignKey('scope-') },
      { ...base, scopes: ['orders:read'], key: foreignKey('forever-') },
      { ...base, scopes: ['orders:read'], expires_at: inAnHour, key: foreignKey('within-') },
    ]),
  )
  t.match(lines[0], { status: 'invalid', error: /allowed_scopes/ }, `a scope outside it: ${lines[0]?.error}`)
  t.match(
    lines[1],
    { status: 'invalid', error: /max_ttl_seconds|expire/ },
    `no expiry past its TTL: ${lines[1]?.error}`,
  )
  t.equal(lines[2]?.status, 'imported', 'a key within it imports')
  t.same([summary?.imported, summary?.invalid], [1, 2])
})

t.test('an imported key expires, rolls and revokes as a minted one', async (t) => {
  const subId = await newSub()
  const expiring = foreignKey('exp-')
  const rolling = foreignKey('roll-')
  const revoking = foreignKey('rev-')
  const soon = new Date(Date.now() + 2_000).toISOString()
  const { lines } = await importKeys(
    ndjson([
      { sub_account_id: subId, name: 'expiring', scopes: ['orders:read'], key: expiring, expires_at: soon },
      { sub_account_id: subId, name: 'rolling', scopes: ['orders:read'], key: rolling },
      { sub_account_id: subId, name: 'revoking', scopes: ['orders:read'], key: revoking },
    ]),
  )
  const [expiringId, rollingId, revokingId] = lines.map((l) => l.key_id!)
  for (const key of [rolling, revoking]) t.equal((await proxied(b, key)).status, 200, 'B knows the key')

  let last: RawResponse | null = null
  t.not(
    await eventually(10_000, async () => {
      last = await proxied(a, expiring)
      return last.status === 401
    }),
    null,
    'the expiring key is refused once past expires_at',
  )
  checkProblem(t, last!, 401, 'key_expired', 'the expired imported key')
  t.equal((await manage('GET', `/${subId}/api-keys/${expiringId}`)).json().status, 'expired')

  const rolled = await manage('POST', `/${subId}/api-keys/${rollingId}/roll`, { expires_in_seconds: 0 })
  t.equal(rolled.statusCode, 201, rolled.body.slice(0, 200))
  t.match(rolled.json(), { origin: 'minted', rolled_from: rollingId, api_key: /^tgw_/ })
  t.equal((await proxied(b, rolled.json().api_key)).status, 200, 'the rolled key works')
  t.not(await eventually(1_000, async () => (await proxied(b, rolling)).status === 401), null, 'B refuses the old one')

  t.equal((await manage('POST', `/${subId}/api-keys/${revokingId}/revoke`)).statusCode, 200)
  t.not(await eventually(1_000, async () => (await proxied(b, revoking)).status === 401), null, 'B refuses it')
  checkProblem(t, await proxied(a, revoking), 401, 'unauthenticated', 'the revoked imported key')
})

t.test('a foreign value is looked up as a key; a value of no key shape is malformed', async (t) => {
  checkProblem(t, await proxied(a, foreignKey('nobody-')), 401, 'unauthenticated', 'an unknown foreign value')
  const res = await proxied(a, foreignKey('nobody-'))
  t.match(res.json().detail, /unknown or revoked/)
  const short = await proxied(a, 'short-value')
  t.match(short.json().detail, /malformed/, 'too short to be any key: malformed, no lookup')
})

t.test('the body: its type, its limits, and no body', async (t) => {
  const path = '/v1/sub-accounts/api-keys/imports'
  const json = await callAs(a.url, parent.apiKey, { method: 'POST', path, acting: 'self', json: { key: 'x' } })
  checkProblem(t, json, 415, 'unsupported_media_type', 'JSON')
  const empty = await importKeys('')
  checkProblem(t, empty.res, 400, 'validation_failed', 'no lines')
  const before = await countKeys()
  const subId = await newSub()
  const line = JSON.stringify({ sub_account_id: subId, name: 'x', scopes: ['orders:read'], key: foreignKey('many-') })
  const tooMany = await importKeys(`${line}\n${'{}\n'.repeat(100_000)}`)
  checkProblem(t, tooMany.res, 413, 'payload_too_large', 'more than 100,000 lines')
  t.match(tooMany.res.json().detail, /100000 lines/)
  const tooBig = await importKeys(`${line}\n${'x'.repeat(64 * 1024 * 1024)}`)
  checkProblem(t, tooBig.res, 413, 'payload_too_large', 'more than 64 MiB')
  t.equal(await countKeys(), before, 'nothing imported from a body over a limit')
  const declared = await callAs(a.url, parent.apiKey, {
    method: 'POST',
    path,
    acting: 'self',
    headers: [
      ['Content-Type', 'application/x-ndjson'],
      ['Content-Length', String(64 * 1024 * 1024 + 1)],
      ['Expect', '100-continue'],
    ],
  })
  checkProblem(t, declared, 413, 'payload_too_large', 'a declared size over 64 MiB, before any byte')
  const subKey = (await manage('POST', `/${subId}/api-keys`, { name: 'k', scopes: ['orders:read'] })).json().api_key
  checkProblem(t, (await importKeys(`${line}\n`, '', subKey)).res, 403, 'parent_key_required', 'a sub-account key')
})

t.test('a body that stops coming: 408 request_timeout at its own deadline, nothing imported', async (t) => {
  const slow = await startGateway(t, { managementStreamedBodyTimeoutMs: 300 })
  const owner = await slow.createParent()
  const subId = (
    await slow.call(owner.apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name: 's' } })
  ).json().id
  const line = JSON.stringify({ sub_account_id: subId, name: 'x', scopes: ['orders:read'], key: foreignKey('slow-') })
  const url = new URL(slow.url)
  const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method: 'POST',
        path: '/v1/sub-accounts/api-keys/imports',
        headers: {
          authorization: `Bearer ${owner.apiKey}`,
          'x-service-acting-tenant': 'self',
          'content-type': 'application/x-ndjson',
          'transfer-encoding': 'chunked',
        },
      },
      (res) => {
        let body = ''
        res.on('data', (chunk: Buffer) => {
          body += chunk.toString()
        })
        res.on('end', () => resolve({ status: res.statusCode!, body }))
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.write(`${line}\n`) // and never the rest
  })
  t.equal(answer.status, 408, answer.body)
  t.equal(JSON.parse(answer.body).code, 'request_timeout')
  const [row] = await slow.sql`select count(*)::int as n from api_keys where tenant_id = ${subId}`
  t.equal(row!.n, 0, 'nothing imported')
})
