// The README and docs/operations.md show `migrate`'s answer on a fresh database: one version per
// file in src/store/migrations/. A new migration that leaves them behind fails here (issue 29: the
// README said [1,2,3,4] when there were 15).
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '../..')
const versions = readdirSync(join(ROOT, 'src/store/migrations'))
  .filter((name) => /^\d{3}_.*\.sql$/.test(name))
  .map((name) => Number(name.slice(0, 3)))
  .sort((a, b) => a - b)

t.test("every fresh database's migrate answer shown in the docs lists every migration", async (t) => {
  t.same(
    versions,
    versions.map((_, i) => i + 1),
    'the migrations are numbered 1 to N',
  )
  for (const doc of ['README.md', 'docs/operations.md']) {
    const text = readFileSync(join(ROOT, doc), 'utf8')
    const shown = [...text.matchAll(/\{"applied":\[([\d,]+)\]\}/g)].map((m) => m[1]!.split(',').map(Number))
    t.ok(shown.length > 0, `${doc} shows a fresh database's answer`)
    for (const list of shown) t.same(list, versions, `${doc}: {"applied":[${list.join(',')}]}`)
  }
})
