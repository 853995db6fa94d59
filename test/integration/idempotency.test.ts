// Idempotency keys on the management API's writes (docs/api.md, Idempotency), on a real Postgres:
// replays, secrets kept sealed, reuse and in-flight refusals, what is not kept, per calling key,
// expiry, a dead request's claim, the sweep and the header's own checks.
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { open } from '../../src/encryption/seal.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { type CallOptions, type Parent, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { problemOf } from '../helpers/problems.js'

const PREFIX = '/v1/sub-accounts'

t.test('idempotency keys', async (t) => {
  const gw = await startGateway(t, { redis: false, idempotencySweepIntervalMs: 50 })
  const count = async (query: string, ...params: string[]) =>
    Number((await gw.sql.unsafe(query, params))[0]!.n as number)
  const subAccounts = (parent: Parent) =>
    count('select count(*)::int as n from tenants where parent_id = $1', parent.id)
  /** A call as `parent`, acting as itself, with the Idempotency-Key `key`. */
  const call = (parent: Parent, key: string, options: CallOptions) =>
    gw.call(parent.apiKey, { acting: 'self', ...options, headers: { 'idempotency-key': key, ...options.headers } })
  const create = (parent: Parent, key: string, name = 'acme') =>
    call(parent, key, { method: 'POST', url: PREFIX, body: { name } })

  t.test('a create sent again gets the kept answer, and makes nothing', async (t) => {
    const parent = await gw.createParent()
    const first = await create(parent, 'create-1')
    t.equal(first.statusCode, 201)
    t.equal(first.headers['idempotent-replayed'], undefined, 'the first answer is no replay')
    const again = await create(parent, 'create-1')
    t.equal(again.statusCode, 201, 'the same status')
    t.equal(again.headers['idempotent-replayed'], 'true')
    t.equal(again.body, first.body, 'the same body')
    t.equal(again.headers.location, first.headers.location, 'the same Location')
    t.equal(again.headers['content-type'], first.headers['content-type'])
    t.not(again.headers['x-request-id'], first.headers['x-request-id'], 'its own request id')
    t.equal(await subAccounts(parent), 1, 'one sub-account')
  })

  t.test('a mint and a roll sent again: the same secrets, kept only sealed', async (t) => {
    const parent = await gw.createParent()
    const sub = (await create(parent, 'sub')).json()
    const mint = () =>
      call(parent, 'mint-1', {
        method: 'POST',
        url: `${PREFIX}/${sub.id}/api-keys`,
        body: { name: 'orders', scopes: ['orders:read'] },
      })
    const first = await mint()
    t.equal(first.statusCode, 201)
    const again = await mint()
    t.equal(again.statusCode, 201)
    t.equal(again.headers['idempotent-replayed'], 'true')
    t.equal(again.headers['cache-control'], 'no-store', 'still not to be kept on the way')
    const minted = first.json()
    t.match(minted.api_key, /^tgw_/)
    t.match(minted.client_secret, /^tgws_/)
    t.same(again.json(), minted, 'the same key and client secret')
    t.equal(await count('select count(*)::int as n from api_keys where tenant_id = $1', sub.id), 1, 'one key')

    const roll = () => call(parent, 'roll-1', { method: 'POST', url: `${PREFIX}/${sub.id}/api-keys/${minted.id}/roll` })
    const rolled = await roll()
    t.equal(rolled.statusCode, 201)
    const rolledAgain = await roll()
    t.equal(rolledAgain.headers['idempotent-replayed'], 'true')
    t.equal(rolledAgain.body, rolled.body, 'the same successor and secrets')
    t.equal(rolledAgain.headers.location, rolled.headers.location)
    t.equal(await count('select count(*)::int as n from api_keys where tenant_id = $1', sub.id), 2, 'one successor')

    const rows = await gw.sql<{ idempotency_key: string; body: Uint8Array; row: string }[]>`
      select k.idempotency_key, k.body, k::text as row from idempotency_keys k where key_id = ${parent.keyId}`
    t.equal(rows.length, 3)
    for (const { idempotency_key, body, row } of rows) {
      const bytes = Buffer.from(body)
      for (const secret of ['tgw_', 'tgws_', minted.api_key, minted.client_secret]) {
        t.notOk(bytes.includes(secret), `${idempotency_key}: the body does not hold ${secret.slice(0, 8)}…`)
        t.notOk(row.includes(secret), `${idempotency_key}: nor does the rest of the row`)
      }
      const opened = open(
        Buffer.from(TEST_ENCRYPTION_KEY, 'base64'),
        bytes,
        `idempotency:${parent.keyId}:${idempotency_key}`,
        'a kept answer',
      )
      t.ok(opened.length > 0, `${idempotency_key}: sealed under ENCRYPTION_KEY`)
      if (idempotency_key === 'mint-1') t.same(JSON.parse(opened.toString('utf8')), minted)
    }
  })

  t.test('the key with another body, path or method: 422 idempotency_key_reused', async (t) => {
    const parent = await gw.createParent()
    const first = await create(parent, 'reused', 'first')
    t.equal(first.statusCode, 201)
    const { id } = first.json()
    const refusals = {
      'another body': await create(parent, 'reused', 'second'),
      'the same JSON spaced otherwise': await call(parent, 'reused', {
        method: 'POST',
        url: PREFIX,
        body: '{ "name": "first" }',
      }),
      'another path': await call(parent, 'reused', { method: 'POST', url: `${PREFIX}/${id}/deactivate` }),
      // No path takes both methods: PATCH the sub-account the POST made.
      'another method': await call(parent, 'reused', {
        method: 'PATCH',
        url: `${PREFIX}/${id}`,
        body: { name: 'first' },
      }),
    }
    for (const [what, res] of Object.entries(refusals)) {
      t.equal(res.statusCode, 422, what)
      t.equal(problemOf(res).code, 'idempotency_key_reused', what)
    }
    t.equal(await subAccounts(parent), 1, 'nothing else made')
    t.equal((await create(parent, 'reused', 'first')).headers['idempotent-replayed'], 'true', 'still kept')
  })

  t.test('a 400 is not kept: the fixed request runs; a 404 is kept', async (t) => {
    const parent = await gw.createParent()
    const refused = await call(parent, 'fix-me', { method: 'POST', url: PREFIX, body: { name: '   ' } })
    t.equal(refused.statusCode, 400)
    t.equal(problemOf(refused).code, 'validation_failed')
    const fixed = await create(parent, 'fix-me', 'fixed')
    t.equal(fixed.statusCode, 201, 'another body with the key runs: the 400 let it go')
    t.equal(fixed.headers['idempotent-replayed'], undefined)

    // A 5xx: the store fails the insert once, as a broken deploy or a bug would.
    await gw.sql.unsafe(`
      create function refuse_exploding() returns trigger language plpgsql as $$
      begin raise exception 'boom'; end $$;
      create trigger refuse_exploding before insert on tenants
        for each row when (new.name = 'exploding') execute function refuse_exploding();`)
    const failed = await create(parent, 'retry-me', 'exploding')
    t.equal(failed.statusCode, 500, `a 5xx (${failed.body.slice(0, 200)})`)
    await gw.sql.unsafe('drop trigger refuse_exploding on tenants; drop function refuse_exploding()')
    const retried = await create(parent, 'retry-me', 'exploding')
    t.equal(retried.statusCode, 201, 'the retry runs: the 5xx let the key go')
    t.equal(retried.headers['idempotent-replayed'], undefined)

    const unknown = `${PREFIX}/00000000-0000-4000-8000-000000000000/deactivate`
    const missing = await call(parent, 'not-there', { method: 'POST', url: unknown })
    t.equal(missing.statusCode, 404)
    const missingAgain = await call(parent, 'not-there', { method: 'POST', url: unknown })
    t.equal(missingAgain.statusCode, 404)
    t.equal(missingAgain.headers['idempotent-replayed'], 'true', 'the 404 is kept')
    t.equal(missingAgain.body, missing.body)
  })

  t.test('refusals before the lookup (acting rules, body parsing) do not use the key', async (t) => {
    const parent = await gw.createParent()
    const forbidden = await call(parent, 'early', {
      method: 'POST',
      url: PREFIX,
      acting: '00000000-0000-4000-8000-000000000000',
      body: { name: 'early' },
    })
    t.equal(forbidden.statusCode, 403)
    const notJson = await call(parent, 'early', { method: 'POST', url: PREFIX, body: '{"name":' })
    t.equal(problemOf(notJson).code, 'invalid_json')
    t.equal(await count('select count(*)::int as n from idempotency_keys where key_id = $1', parent.keyId), 0)
    const runs = await create(parent, 'early', 'early')
    t.equal(runs.statusCode, 201)
    t.equal(runs.headers['idempotent-replayed'], undefined)
  })

  t.test('while the first still runs: 409 idempotency_key_in_flight, Retry-After: 1', async (t) => {
    const parent = await gw.createParent()
    const sub = (await create(parent, 'to-update')).json()
    const patch = () => call(parent, 'patch-1', { method: 'PATCH', url: `${PREFIX}/${sub.id}`, body: { name: 'new' } })
    // The first request's update waits on the sub-account's row, locked by the test.
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    let locked!: () => void
    const isLocked = new Promise<void>((resolve) => (locked = resolve))
    const holding = gw.sql.begin(async (tx) => {
      await tx`select 1 from tenants where id = ${sub.id} for update`
      locked()
      await released
    })
    await isLocked
    const first = patch()
    const claimed = await eventually(
      5_000,
      async () =>
        (await count("select count(*)::int as n from idempotency_keys where idempotency_key = 'patch-1'")) === 1,
    )
    t.not(claimed, null, 'the first request claimed the key')
    const second = await patch()
    release()
    await holding
    t.equal(second.statusCode, 409)
    t.equal(problemOf(second).code, 'idempotency_key_in_flight')
    t.equal(second.headers['retry-after'], '1')
    const firstAnswer = await first
    t.equal(firstAnswer.statusCode, 200, `the first ran (${firstAnswer.body.slice(0, 200)})`)
    t.equal((await patch()).headers['idempotent-replayed'], 'true', 'then its answer is kept')
  })

  t.test('a claim whose request died is taken over once it is a minute old', async (t) => {
    const parent = await gw.createParent()
    const first = await create(parent, 'crashed')
    t.equal(first.statusCode, 201)
    // As a replica that died after its claim, before its change committed, leaves it: no answer, no
    // mark (a change that committed is never run again: idempotency-outcome.test.ts).
    const unanswered = (age: string) => gw.sql`
      update idempotency_keys set status = null, headers = null, body = null, committed_target = null,
        claimed_at = now() - ${age}::interval
      where key_id = ${parent.keyId} and idempotency_key = 'crashed'`
    await unanswered('30 seconds')
    const young = await create(parent, 'crashed')
    t.equal(young.statusCode, 409, 'a young claim is in flight')
    t.equal(problemOf(young).code, 'idempotency_key_in_flight')
    await unanswered('61 seconds')
    t.equal((await create(parent, 'crashed', 'other')).statusCode, 422, 'not by another request')
    const taken = await create(parent, 'crashed')
    t.equal(taken.statusCode, 201, 'the same request takes it over and runs')
    t.equal(taken.headers['idempotent-replayed'], undefined)
    t.equal((await create(parent, 'crashed')).body, taken.body, 'and its answer is kept')
  })

  t.test('keys are per calling key', async (t) => {
    const parent = await gw.createParent()
    const other = await mintKey(gw.sql, {
      tenantId: parent.id,
      name: 'second',
      scopes: ['sub_accounts:read', 'sub_accounts:write'],
      withClientSecret: false,
    })
    const first = await create(parent, 'shared')
    const second = await create({ ...parent, apiKey: other.apiKey, keyId: other.row.id }, 'shared')
    t.equal(second.statusCode, 201)
    t.equal(second.headers['idempotent-replayed'], undefined, 'another key runs anew')
    t.not(second.json().id, first.json().id)
    t.equal(await subAccounts(parent), 2)
  })

  t.test('kept 24 h; expired, the request runs anew; expired rows are swept', async (t) => {
    const parent = await gw.createParent()
    const first = await create(parent, 'day')
    const [kept] = await gw.sql<{ left: number }[]>`
      select extract(epoch from expires_at - now())::float8 as left from idempotency_keys
      where key_id = ${parent.keyId} and idempotency_key = 'day'`
    t.ok(kept!.left > 24 * 3600 - 60 && kept!.left <= 24 * 3600, `kept 24 h (${kept!.left} s left)`)
    await gw.sql`update idempotency_keys set expires_at = now() - interval '1 second'
      where key_id = ${parent.keyId} and idempotency_key = 'day'`
    const later = await create(parent, 'day')
    t.equal(later.statusCode, 201)
    t.equal(later.headers['idempotent-replayed'], undefined, 'past 24 h the key is free')
    t.not(later.json().id, first.json().id)

    await gw.sql`update idempotency_keys set expires_at = now() - interval '1 second'
      where key_id = ${parent.keyId} and idempotency_key = 'day'`
    const swept = await eventually(
      10_000,
      async () => (await count("select count(*)::int as n from idempotency_keys where idempotency_key = 'day'")) === 0,
    )
    t.not(swept, null, 'the expired row is deleted')
  })

  t.test('the header: 1 to 255 printable ASCII characters, once', async (t) => {
    const parent = await gw.createParent()
    const post = (headers: [string, string][], name = 'h') =>
      callAs(gw.url, parent.apiKey, { method: 'POST', path: PREFIX, acting: 'self', json: { name }, headers })
    const refused = {
      empty: await post([['Idempotency-Key', '']]),
      '256 characters': await post([['Idempotency-Key', 'k'.repeat(256)]]),
      'not ASCII': await post([['Idempotency-Key', 'caf\u00e9']]),
      'a tab': await post([['Idempotency-Key', 'a\tb']]),
      'sent twice': await post([
        ['Idempotency-Key', 'one'],
        ['Idempotency-Key', 'one'],
      ]),
    }
    for (const [what, res] of Object.entries(refused)) {
      t.equal(res.status, 400, `${what}: ${res.body.slice(0, 200)}`)
      t.match(res.json(), { code: 'validation_failed', errors: [{ path: '/headers/idempotency-key' }] }, what)
    }
    t.equal(await subAccounts(parent), 0, 'nothing made')
    const longest = `${'k'.repeat(254)}~`
    t.equal((await post([['Idempotency-Key', longest]])).status, 201, '255 characters')
    t.equal((await post([['Idempotency-Key', longest]])).headers['idempotent-replayed'], 'true')
    t.equal((await post([['Idempotency-Key', ' !"#$%&\'()*+,-./ spaces inside']], 'p')).status, 201, 'punctuation')
    const list = await callAs(gw.url, parent.apiKey, { path: PREFIX, headers: [['Idempotency-Key', '']] })
    t.equal(list.status, 200, 'a GET ignores it')
  })
})
