// The spool of a key import (src/auth/key-import-spool.ts; docs/decisions/0371): the lines go to a
// temporary file that has no name from the moment it is open, and its descriptor is closed
// however the import ends: done, over a limit, the client gone while it sends the body, or gone
// while the answer streams. Seen from /proc/self/fd, since the gateway runs in this process.
import { createHook } from 'node:async_hooks'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, readlinkSync, rmSync, statSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { SPOOL_FILE_PREFIX } from '../../src/auth/key-import-spool.js'
import { STREAMED_BODY_TIMEOUT_MS } from '../../src/management/hooks.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

// A temporary directory of this file's own (os.tmpdir() reads TMPDIR at each call): the test
// files running beside it open spools in the system's, each named for a moment, which are not
// this gateway's to answer for.
const ownTmp = mkdtempSync(join(tmpdir(), 'tgw-spool-test-'))
process.env.TMPDIR = ownTmp
t.teardown(() => rmSync(ownTmp, { recursive: true, force: true }))

const upstream = await startUpstream(t)
const gateway = await startGateway(t, { upstreamUrl: upstream.url })
const sql = gateway.database.sql
const parent = await gateway.createParent()
const sub = (
  await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'spooled', external_id: 'spooled' },
  })
).json().id as string

/** This process's open spools: their descriptors' targets (`… (deleted)`: unlinked) and sizes in bytes. */
function spoolFiles(): { target: string; bytes: number }[] {
  return readdirSync('/proc/self/fd').flatMap((fd) => {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`)
      // stat through /proc follows the descriptor, so an unlinked file still has its size.
      return target.includes(SPOOL_FILE_PREFIX) ? [{ target, bytes: statSync(`/proc/self/fd/${fd}`).size }] : []
    } catch {
      return [] // closed between the listing and the read (readdir's own descriptor)
    }
  })
}
const openSpools = () => spoolFiles().map((spool) => spool.target)
const namedSpools = () => readdirSync(tmpdir()).filter((name) => name.startsWith(SPOOL_FILE_PREFIX))
const countKeys = async () =>
  (await sql`select count(*)::int as n from api_keys where origin = 'imported'`)[0]!.n as number

const line = () =>
  `${JSON.stringify({ sub_account_id: sub, name: 'k', scopes: ['orders:read'], key: `sk_${randomBytes(18).toString('base64url')}` })}\n`
const lines = (n: number) => Array.from({ length: n }, line).join('')

/** A POST of the import whose body the test writes as it likes (chunked), and its answer when it comes. */
function openImport() {
  const url = new URL('/v1/sub-accounts/api-keys/imports', gateway.url)
  const req = httpRequest(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${parent.apiKey}`,
      'x-service-acting-tenant': 'self',
      'content-type': 'application/x-ndjson',
    },
  })
  req.on('error', () => {}) // destroyed on purpose
  const answered = new Promise<import('node:http').IncomingMessage>((resolve) => req.once('response', resolve))
  return { req, answered }
}

t.test('an import done, and one over the line limit: no spool stays open', async (t) => {
  const done = await callAs(gateway.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/api-keys/imports',
    acting: 'self',
    headers: [['Content-Type', 'application/x-ndjson']],
    body: lines(1_200),
  })
  t.equal(done.status, 200)
  t.match(done.body, /"imported":1200/)
  const over = await callAs(gateway.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/api-keys/imports',
    acting: 'self',
    headers: [['Content-Type', 'application/x-ndjson']],
    body: '{}\n'.repeat(100_001),
  })
  t.equal(over.status, 413)
  t.same(openSpools(), [], 'no spool open')
  t.same(namedSpools(), [], 'none left in the temporary directory')
})

/**
 * The body deadlines of streamed bodies under way in this process: timers of STREAMED_BODY_TIMEOUT_MS
 * (a Timeout's `_idleTimeout` is its delay), from their start to their clearing or firing.
 */
const bodyDeadlines = new Set<number>()
const timerHook = createHook({
  init(id, type, _trigger, resource) {
    if (type === 'Timeout' && (resource as { _idleTimeout?: number })._idleTimeout === STREAMED_BODY_TIMEOUT_MS)
      bodyDeadlines.add(id)
  },
  destroy(id) {
    bodyDeadlines.delete(id)
  },
}).enable()
t.teardown(() => timerHook.disable())

t.test('the client gone while it sends the body: the spool is closed, nothing imported', async (t) => {
  const before = await countKeys()
  const { req } = openImport()
  req.write(lines(1_000))
  // Written to, not only open: the spool is unlinked between its open and its first write, and the
  // test must not look inside that window (a name held for no byte of the body).
  t.ok(await until(10_000, async () => (spoolFiles()[0]?.bytes ?? 0) > 0), 'the body is spooled as it comes')
  t.match(openSpools()[0], /\(deleted\)$/, 'to a file without a name')
  t.ok(openSpools()[0]!.startsWith(`${ownTmp}/`), 'in the temporary directory')
  t.same(namedSpools(), [], 'that the temporary directory does not list')
  t.equal(bodyDeadlines.size, 1, 'its body has a deadline')
  req.destroy()
  t.ok(await until(10_000, async () => openSpools().length === 0), 'the spool is closed once the client is gone')
  t.equal(await countKeys(), before, 'nothing imported')
  // No answer went out, so no onResponse: the body's two-minute deadline ends with the request all the same.
  t.ok(await until(10_000, async () => bodyDeadlines.size === 0), 'no timer of the request outlives it')
})

t.test('the client gone while the answer streams: the spool is closed', async (t) => {
  const { req, answered } = openImport()
  // Enough batches that the answer is far from done when its reader goes.
  req.end(lines(30_000))
  const res = await answered
  t.equal(res.statusCode, 200)
  t.equal(openSpools().length, 1, 'the import under way reads its spool')
  res.destroy()
  t.ok(await until(10_000, async () => openSpools().length === 0), 'the spool is closed once the reader is gone')
})

t.test("a line over 64 KiB is invalid, its neighbours imported; names cross the spool's chunks whole", async (t) => {
  const long = JSON.stringify({ sub_account_id: sub, name: 'long', scopes: ['orders:read'], key: 'x'.repeat(70_000) })
  // Names of multi-byte characters, enough of them that the spool's 64 KiB reads end inside some.
  const named = Array.from({ length: 600 }, (_, i) => ({
    sub_account_id: sub,
    name: `clé ${i} ${'€'.repeat(40)}`,
    scopes: ['orders:read'],
    key: `sk_${randomBytes(18).toString('base64url')}`,
  }))
  const res = await callAs(gateway.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/api-keys/imports',
    acting: 'self',
    headers: [['Content-Type', 'application/x-ndjson']],
    body: `${line()}${long}\n${named.map((l) => JSON.stringify(l)).join('\n')}\n`,
  })
  t.equal(res.status, 200)
  const answer = res.body
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l))
  t.same(answer[1], { line: 2, status: 'invalid', error: 'longer than 65536 bytes: each line holds one key' })
  t.same(answer.at(-1).summary, { lines: 602, imported: 601, exists: 0, invalid: 1, dry_run: false })
  const ids = answer.slice(2, -1).map((l: { key_id: string }) => l.key_id)
  const rows = await sql<{ id: string; name: string }[]>`
    select id, name from api_keys where id = any (array(select jsonb_array_elements_text(${sql.json(ids)})::uuid))`
  const byId = new Map(rows.map((r) => [r.id, r.name]))
  t.same(
    ids.map((id: string) => byId.get(id)),
    named.map((l) => l.name),
    'each name as sent',
  )
})

t.test('a temporary directory the spool cannot be made in: a 503 that says so, nothing imported', async (t) => {
  const before = await countKeys()
  const saved = process.env.TMPDIR
  // os.tmpdir() reads TMPDIR at each call: a directory that is not there stands for one unwritable.
  process.env.TMPDIR = `/nonexistent-${randomBytes(6).toString('hex')}`
  t.teardown(() => {
    if (saved === undefined) delete process.env.TMPDIR
    else process.env.TMPDIR = saved
  })
  const res = await callAs(gateway.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/api-keys/imports',
    acting: 'self',
    headers: [['Content-Type', 'application/x-ndjson']],
    body: lines(3),
  })
  t.equal(res.status, 503)
  const problem = JSON.parse(res.body)
  t.equal(problem.code, 'spool_unavailable')
  t.match(problem.detail, /temporary directory/)
  t.equal(await countKeys(), before, 'nothing imported')
})
