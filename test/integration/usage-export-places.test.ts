// An export answers with a stream that its client reads at its own pace (management/heavy-reads.ts):
// the call's place of the heavy reads' gate goes back once its first page is read, not at its last
// byte, so that exports a client stops reading hold no place, and keep no other heavy read waiting,
// its own parent's included (two places a parent: HEAVY_READS_PER_ACCOUNT).
import http from 'node:http'
import t, { type Test } from 'tap'
import { HEAVY_READS_PER_ACCOUNT } from '../../src/management/heavy-reads.js'
import { startGateway } from '../helpers/gateway.js'

const gw = await startGateway(t, { env: { USAGE_PERIOD_SECONDS: '60' } })
const parent = await gw.createParent({ name: 'exports' })
// 20,000 records: some 10 MB of ndjson, far more than a connection's buffers hold unread.
await gw.sql`insert into usage_period_units (tenant_id, period_start, meter, units, requests)
  select ${parent.id}, ${new Date(Date.UTC(2026, 0, 1))}, 'm' || lpad(g::text, 6, '0'), 1, 1 from generate_series(1, 20000) g`
await gw.sql`update usage_close set closed_until = now()`
const EXPORT = '/v1/sub-accounts/usage/export?from=2026-01-01T00:00:00Z&to=2026-01-01T01:00:00Z'

/** An export whose client reads its head and then nothing: closed at the test's end. */
function unread(t: Test): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = http.get(`${gw.url}${EXPORT}`, { headers: { authorization: `Bearer ${parent.apiKey}` } }, (res) => {
      res.pause()
      t.teardown(() => res.destroy())
      resolve(res)
    })
    request.on('error', reject)
  })
}

t.test("exports left unread hold no place: the parent's next heavy read is answered", async (t) => {
  const held = []
  for (let i = 0; i < HEAVY_READS_PER_ACCOUNT; i++) held.push(await unread(t))
  t.same(
    held.map((res) => res.statusCode),
    held.map(() => 200),
    'each export answered, its body waiting to be read',
  )
  // Held until their last byte, these would keep both of the parent's places.
  const usage = await gw.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts/usage', acting: 'self' })
  t.equal(usage.statusCode, 200, `a usage report of the same parent: ${usage.body.slice(0, 200)}`)
  // Held at their last byte, each export's next page would wait for a place, and be cut short.
  for (const [i, res] of held.entries()) {
    const lines = await readToTheEnd(res)
    t.same([res.complete, lines], [true, 20_000], `export ${i + 1}, read now: whole, every record once`)
  }
})

/** Reads the rest of `res`; the lines its body held. */
function readToTheEnd(res: http.IncomingMessage): Promise<number> {
  return new Promise((resolve) => {
    let lines = 0
    res.on('data', (chunk: Buffer) => {
      for (const byte of chunk) if (byte === 10) lines++
    })
    res.on('close', () => resolve(lines))
    res.resume()
  })
}
