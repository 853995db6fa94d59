// Cursors.list (management/paging.ts), the paged list every `?limit&cursor` route reads through:
// the cursor is checked for its list and owner before any row is read, limit+1 rows are asked
// for, and the page's next cursor leads on from its last row. No I/O: the secret is given.
import t from 'tap'
import { Cursors, type CursorScope, type PageStart } from '../../src/management/paging.js'
import { PAGE_LIMIT_DEFAULT } from '../../src/schemas/common.js'

const cursors = new Cursors(async () => Buffer.alloc(32, 1))
const plans: CursorScope = { list: 'plans', owner: 'parent-a' }
const rows = (from: number, count: number) => Array.from({ length: count }, (_, i) => ({ seq: String(from + i) }))

t.test('no limit: PAGE_LIMIT_DEFAULT and one more read from the start; a page and a cursor on', async (t) => {
  const asked: PageStart[] = []
  const page = await cursors.list(
    {},
    plans,
    async (start) => {
      asked.push(start)
      return rows(1, start.limit)
    },
    (row) => Number(row.seq),
  )
  t.same(asked, [{ limit: PAGE_LIMIT_DEFAULT + 1, afterSeq: null }])
  t.equal(page.data.length, PAGE_LIMIT_DEFAULT)
  t.not(page.next_cursor, null)
  const after: PageStart[] = []
  await cursors.list(
    { limit: 2, cursor: page.next_cursor! },
    plans,
    async (start) => {
      after.push(start)
      return []
    },
    (row) => row,
  )
  t.same(after, [{ limit: 3, afterSeq: String(PAGE_LIMIT_DEFAULT) }], 'the next page starts after the last row shown')
})

t.test('the last page: no cursor on', async (t) => {
  const page = await cursors.list(
    { limit: 5 },
    plans,
    async () => rows(1, 5),
    (row) => row.seq,
  )
  t.same(page, { data: ['1', '2', '3', '4', '5'], next_cursor: null })
})

t.test("another list's or another owner's cursor: a 400 before any row is read", async (t) => {
  const cursor = await cursors.encode('7', plans)
  for (const scope of [
    { list: 'webhook-endpoints', owner: 'parent-a' },
    { list: 'plans', owner: 'parent-b' },
  ] as const) {
    let read = false
    await t.rejects(
      cursors.list(
        { cursor },
        scope,
        async () => {
          read = true
          return []
        },
        (row) => row,
      ),
      { code: 'validation_failed' },
    )
    t.equal(read, false, `${scope.list}/${scope.owner}: nothing read`)
  }
})
