// Reads of the request log at once (src/management/log-reads.ts): a parent's own two run, a third
// is refused at once with 429 too_many_concurrent_requests, another parent's are not counted, and a
// read that ends (answered or failed) gives its place back. Its customers' portal reads are
// counted apart from its own, two a sub-account and four for all of them.
import t from 'tap'
import { ApiError } from '../../src/errors.js'
import { LogReads, parentPlaces, portalPlaces } from '../../src/management/log-reads.js'

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
  const reads = new LogReads()
  const first = heldRead()
  const second = heldRead()
  const running = [reads.run(parentPlaces('a'), first.read), reads.run(parentPlaces('a'), second.read)]
  const refused = await reads.run(parentPlaces('a'), async () => 'third').catch((err: unknown) => err)
  t.ok(refused instanceof ApiError, 'the third is an API error')
  t.match(refused, {
    code: 'too_many_concurrent_requests',
    status: 429,
    detail: /^this account already has 2 reads of the request log under way/,
  })
  t.same((refused as ApiError).options.headers, { 'retry-after': '1' }, 'to be retried in a second')
  t.equal(await reads.run(parentPlaces('b'), async () => 'other'), 'other', "another account's read runs")

  first.end('one')
  t.equal(await running[0], 'one')
  t.equal(await reads.run(parentPlaces('a'), async () => 'after'), 'after', 'an ended read gives its place back')
  second.fail(new Error('store down'))
  await t.rejects(running[1]!, /store down/, 'a read that fails passes its error on')
  const again = [heldRead(), heldRead()]
  const both = again.map((held) => reads.run(parentPlaces('a'), held.read))
  await t.rejects(
    reads.run(parentPlaces('a'), async () => 'x'),
    { code: 'too_many_concurrent_requests' },
    'the two places back, and no more',
  )
  for (const held of again) held.end('done')
  t.same(await Promise.all(both), ['done', 'done'])
})

t.test("portal reads: two a sub-account, four for a parent's portals, none of the parent's own", async (t) => {
  const reads = new LogReads()
  const held = Array.from({ length: 6 }, heldRead)
  // The parent's own two places taken: its portals still read.
  const parents = [0, 1].map((i) => reads.run(parentPlaces('a'), held[i]!.read))
  const ofOne = [2, 3].map((i) => reads.run(portalPlaces('a', 's1'), held[i]!.read))
  t.match(
    await reads.run(portalPlaces('a', 's1'), async () => 'x').catch((err: unknown) => err),
    { code: 'too_many_concurrent_requests', detail: /^this sub-account's portal already has 2 reads/ },
    "a sub-account's third",
  )
  const ofAnother = [4, 5].map((i) => reads.run(portalPlaces('a', 's2'), held[i]!.read))
  t.match(
    await reads.run(portalPlaces('a', 's3'), async () => 'x').catch((err: unknown) => err),
    { code: 'too_many_concurrent_requests', detail: /^this account's portals already have 4 reads/ },
    "the parent's portals' fifth, of a sub-account that has none under way",
  )
  t.equal(await reads.run(portalPlaces('b', 's3'), async () => 'b'), 'b', "another parent's portal")
  t.match(
    await reads.run(parentPlaces('a'), async () => 'x').catch((err: unknown) => err),
    { code: 'too_many_concurrent_requests', detail: /^this account already has 2 reads/ },
    "the parent's own third, its portals' reads not counted in it",
  )
  // A refusal takes no place: once one of s2's ends, s3's read runs.
  held[4]!.end('s2')
  await ofAnother[0]
  t.equal(await reads.run(portalPlaces('a', 's3'), async () => 's3'), 's3')
  for (const h of held) h.end('done')
  t.same(await Promise.all([...parents, ...ofOne, ...ofAnother]), ['done', 'done', 'done', 'done', 's2', 'done'])
})

t.test('one limit simulation at a time on a replica, parents in turn; other reads go on beside it', async (t) => {
  // Each may hold 20,000 sub-accounts' state: two at once would outgrow a replica's heap.
  const reads = new LogReads()
  const stop = new AbortController().signal
  const order: string[] = []
  const held = { a1: heldRead(), a2: heldRead(), b1: heldRead() }
  const simulation = (name: keyof typeof held) => () => {
    order.push(name)
    return held[name].read()
  }
  const a1 = reads.simulate('a', stop, simulation('a1'))
  // a's second comes before b's first, and still waits behind it: no parent holds the place twice
  // while another waits (the finding: b was refused 13 of 20 while a asked again and again).
  const a2 = reads.simulate('a', stop, simulation('a2'))
  const b1 = reads.simulate('b', stop, simulation('b1'))
  t.equal(await reads.run(parentPlaces('b'), async () => 'page'), 'page', 'another read runs beside it')
  held.a1.end('a1')
  t.equal(await a1, 'a1')
  held.b1.end('b1')
  t.equal(await b1, 'b1', "b's simulation waited for the place and ran")
  held.a2.end('a2')
  t.equal(await a2, 'a2')
  t.same(order, ['a1', 'b1', 'a2'], 'the place went to b before a had it twice')
  await t.rejects(
    reads
      .simulate('a', stop, async () => 'x')
      .then(() => reads.simulate('a', AbortSignal.abort(new Error('late')), async () => 'y')),
    /late/,
    'a simulation whose deadline passed never runs',
  )
})
