// The names of webhook URLs are resolved by c-ares (`resolverLookup`), not getaddrinfo: a name
// whose nameserver never answers held one of the two lookups libuv's thread pool runs at once, for
// 10 s, and a parent creating endpoints with such names stalled every lookup of the replica (its
// upstreams' connections among them). Against a real nameserver on loopback that never answers.
import { createSocket } from 'node:dgram'
import { lookup as systemLookup } from 'node:dns/promises'
import t from 'tap'
import { resolverLookup } from '../../src/webhooks/url-policy.js'

const silent = createSocket('udp4')
let queries = 0
silent.on('message', () => queries++)
await new Promise<void>((resolve) => silent.bind(0, '127.0.0.1', resolve))
t.teardown(() => silent.close())
const lookup = resolverLookup([`127.0.0.1:${silent.address().port}`])

t.test('names whose nameserver never answers stall no other lookup, and fail on their own', async (t) => {
  const pending = Array.from({ length: 8 }, (_, i) => {
    return lookup(`never-${i}.example.com`).then(
      () => 'resolved',
      (err: NodeJS.ErrnoException) => err.code,
    )
  })
  let settled = 0
  for (const one of pending) void one.then(() => settled++)

  // getaddrinfo, as undici, Postgres's and Redis's clients use it: answered while all eight wait.
  const local = await systemLookup('localhost')
  t.ok(local.address, 'the system lookup answers')
  t.equal(settled, 0, 'while every silent name still waits')

  const outcomes = await Promise.all(pending)
  t.same(outcomes, Array(8).fill('ETIMEOUT'), 'each ends on its own, as a timeout')
  t.ok(queries >= 8, 'after the silent nameserver was asked')
})
