// Idempotency keys when a write's outcome is unknown to its client (docs/api.md, Idempotency): the
// store deadline answers 503 while the change's transaction still runs. The change commits only
// if its claim still stands, and a change that committed is never made again by a retry.
import t from 'tap'
import { STORE_DEADLINES } from '../../src/store/deadlines.js'
import { type CallOptions, type Parent, startGateway } from '../helpers/gateway.js'
import { eventually, sleep } from '../helpers/poll.js'
import { problemOf } from '../helpers/problems.js'

const PREFIX = '/v1/sub-accounts'

t.test('a write answered 503 by the store deadline', async (t) => {
  const gw = await startGateway(t, { redis: false, storeDeadlines: STORE_DEADLINES })
  const count = async (query: string, ...params: string[]) =>
    Number((await gw.sql.unsafe(query, params))[0]!.n as number)
  const subAccounts = (parent: Parent) =>
    count('select count(*)::int as n from tenants where parent_id = $1', parent.id)
  const created = (parent: Parent) =>
    count("select count(*)::int as n from events where account_id = $1 and type = 'sub_account.created'", parent.id)
  const call = (parent: Parent, key: string, options: CallOptions) =>
    gw.call(parent.apiKey, { acting: 'self', ...options, headers: { 'idempotency-key': key, ...options.headers } })
  const create = (parent: Parent, key: string, name: string) =>
    call(parent, key, { method: 'POST', url: PREFIX, body: { name } })
  /** No other connection is inside a transaction (the first request's has ended, one way or the other). */
  const settled = () =>
    eventually(10_000, async () => {
      const rows = await gw.sql`
        select 1 from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid() and xact_start is not null`
      return rows.length === 0
    })

  t.test('its transaction still waiting at the 503: it rolls back, and the retry runs once', async (t) => {
    const parent = await gw.createParent()
    // The insert's foreign key waits on the parent's row, locked by another connection for ~2 s.
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    let locked!: () => void
    const isLocked = new Promise<void>((resolve) => (locked = resolve))
    const holding = gw.sql.begin(async (tx) => {
      await tx`select 1 from tenants where id = ${parent.id} for update`
      locked()
      await released
    })
    await isLocked
    const started = Date.now()
    const first = await create(parent, 'slow-lock', 'acme')
    t.equal(first.statusCode, 503, `the store deadline answers (${first.body.slice(0, 200)})`)
    t.equal(problemOf(first).code, 'store_unavailable')
    t.ok(Date.now() - started < 2_500, 'at the deadline, not when the lock goes')
    await sleep(2_000 - (Date.now() - started))
    release()
    await holding
    t.not(await settled(), null, "the first request's transaction has ended")
    t.equal(await subAccounts(parent), 0, 'its claim was let go: the change did not commit')
    t.equal(await created(parent), 0, 'nor its event')

    const retried = await create(parent, 'slow-lock', 'acme')
    t.equal(retried.statusCode, 201, `the retry runs (${retried.body.slice(0, 200)})`)
    t.equal(retried.headers['idempotent-replayed'], undefined)
    const again = await create(parent, 'slow-lock', 'acme')
    t.equal(again.headers['idempotent-replayed'], 'true', 'then its answer is kept')
    t.equal(await subAccounts(parent), 1, 'exactly one sub-account')
    t.equal(await created(parent), 1, 'and one event')
  })

  t.test('its transaction committing at the 503: the retry is told, and makes nothing', async (t) => {
    const parent = await gw.createParent()
    // The commit itself takes 2.5 s: the claim's row is marked and locked when the deadline answers
    // at 1.5 s; the 503's release waits for the commit, and the 503 does not.
    await gw.sql.unsafe(`
      create function slow_commit() returns trigger language plpgsql as $$
      begin perform pg_sleep(2.5); return null; end $$;
      create constraint trigger slow_commit after insert on tenants deferrable initially deferred
        for each row when (new.name = 'slow-commit') execute function slow_commit();`)
    t.teardown(() =>
      gw.sql.unsafe('drop trigger if exists slow_commit on tenants; drop function if exists slow_commit()'),
    )
    const started = Date.now()
    const first = await create(parent, 'slow-commit', 'slow-commit')
    t.equal(first.statusCode, 503, `the store deadline answers (${first.body.slice(0, 200)})`)
    t.equal(problemOf(first).code, 'store_unavailable')
    t.ok(Date.now() - started < 2_300, `at the deadline, not after the commit (${Date.now() - started} ms)`)
    t.not(await settled(), null, "the first request's transaction has ended")
    t.equal(await subAccounts(parent), 1, 'the change committed after the 503')
    const lost = await eventually(5_000, async () => {
      const [row] = await gw.sql<{ answer_lost: boolean }[]>`
        select answer_lost from idempotency_keys where key_id = ${parent.keyId} and idempotency_key = 'slow-commit'`
      return row?.answer_lost === true
    })
    t.not(lost, null, 'the 503 did not let the claim go: it marked its answer lost')
    const [made] = await gw.sql<{ id: string }[]>`select id from tenants where parent_id = ${parent.id}`
    await gw.sql.unsafe('drop trigger slow_commit on tenants; drop function slow_commit()')

    const retried = await create(parent, 'slow-commit', 'slow-commit')
    t.equal(retried.statusCode, 409, `the retry does not run (${retried.body.slice(0, 300)})`)
    const problem = problemOf(retried)
    t.equal(problem.code, 'idempotency_answer_lost')
    t.match(problem.detail, `sub_account ${made!.id}`, 'it names what the change made')
    t.equal((await create(parent, 'slow-commit', 'other')).statusCode, 422, 'another request is still 422')
    t.equal(await subAccounts(parent), 1, 'exactly one sub-account')
    t.equal(await created(parent), 1, 'and one event')
  })

  t.test('a committed change whose replica died before keeping its answer is never run again', async (t) => {
    const parent = await gw.createParent()
    const first = await create(parent, 'died', 'acme')
    t.equal(first.statusCode, 201)
    const id = first.json().id as string
    // As a replica that died between the commit and the keeping of the answer leaves the row.
    const unanswered = (age: string) => gw.sql`
      update idempotency_keys set status = null, headers = null, body = null, claimed_at = now() - ${age}::interval
      where key_id = ${parent.keyId} and idempotency_key = 'died'`
    const [row] = await gw.sql<{ committed_target: unknown }[]>`
      select committed_target from idempotency_keys where key_id = ${parent.keyId} and idempotency_key = 'died'`
    t.same(row!.committed_target, { type: 'sub_account', id }, 'the transaction marked the row')
    await unanswered('30 seconds')
    const young = await create(parent, 'died', 'acme')
    t.equal(problemOf(young).code, 'idempotency_key_in_flight', 'a young claim may still keep its answer')
    await unanswered('61 seconds')
    const stale = await create(parent, 'died', 'acme')
    t.equal(stale.statusCode, 409)
    t.equal(problemOf(stale).code, 'idempotency_answer_lost', 'not taken over: the change committed')
    t.equal(await subAccounts(parent), 1)
  })
})
