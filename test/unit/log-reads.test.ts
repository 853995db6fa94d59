// A parent's reads of the request log at once (src/management/log-reads.ts): two run, a third is
// refused at once with 429 too_many_concurrent_requests, another parent's are not counted, and a
// read that ends (answered or failed) gives its place back.
import t from 'tap'
import { ApiError } from '../../src/errors.js'
import { AccountReads } from '../../src/management/log-reads.js'

/** A read that ends when told. */
function heldRead() {
  let end!: (value: string) => void
  let fail!: (err: Error) => void
  const answer = new Promise<string>((resolve, reject) => {
    end = resolve
    fail = reject
  })
  return { read: () => answer, end, fail }
}

t.test('two reads of one account run at once; a third is refused until one ends', async (t) => {
  const reads = new AccountReads(2)
  const first = heldRead()
  const second = heldRead()
  const running = [reads.run('a', first.read), reads.run('a', second.read)]
  const refused = await reads.run('a', async () => 'third').catch((err: unknown) => err)
  t.ok(refused instanceof ApiError, 'the third is an API error')
  t.match(refused, {
    code: 'too_many_concurrent_requests',
    status: 429,
    detail: /already has 2 reads of the request log under way/,
  })
  t.same((refused as ApiError).options.headers, { 'retry-after': '1' }, 'to be retried in a second')
  t.equal(await reads.run('b', async () => 'other'), 'other', "another account's read runs")

  first.end('one')
  t.equal(await running[0], 'one')
  t.equal(await reads.run('a', async () => 'after'), 'after', 'an ended read gives its place back')
  second.fail(new Error('store down'))
  await t.rejects(running[1]!, /store down/, 'a read that fails passes its error on')
  const again = [heldRead(), heldRead()]
  const both = again.map((held) => reads.run('a', held.read))
  await t.rejects(
    reads.run('a', async () => 'x'),
    { code: 'too_many_concurrent_requests' },
    'the two places back, and no more',
  )
  for (const held of again) held.end('done')
  t.same(await Promise.all(both), ['done', 'done'])
})
