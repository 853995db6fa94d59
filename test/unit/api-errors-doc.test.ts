// docs/api.md's Errors table and the catalogue (src/errors.ts) hold the same codes, each with the
// same status: a code added to ERRORS without its row, or a row left for a code that is gone,
// fails here (issue 58: the table lacked ip_not_allowed).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { ERRORS } from '../../src/errors.js'

const ROOT = join(import.meta.dirname, '..', '..')

/** The rows of the "## Errors" section's table: each code and its status. */
function errorRows(markdown: string): Map<string, number> {
  const section = markdown.split(/^## Errors$/m)[1]?.split(/^## /m)[0]
  if (section === undefined) throw new Error('docs/api.md has no "## Errors" section')
  const rows = new Map<string, number>()
  for (const m of section.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \|/gm)) {
    if (rows.has(m[1]!)) throw new Error(`docs/api.md lists ${m[1]} twice`)
    rows.set(m[1]!, Number(m[2]))
  }
  return rows
}

t.test('the table is read from its own section', async (t) => {
  const markdown = [
    '## Errors',
    '| code | status | when |',
    '|---|---|---|',
    '| `a_b` | 400 | x |',
    '## Next',
    '| `c` | 500 | y |',
  ]
  t.same([...errorRows(markdown.join('\n'))], [['a_b', 400]])
  t.throws(() => errorRows('# API'), /no "## Errors" section/)
})

t.test("docs/api.md's Errors table lists every code of ERRORS, with its status, and no other", async (t) => {
  const rows = errorRows(readFileSync(join(ROOT, 'docs', 'api.md'), 'utf8'))
  const codes = Object.keys(ERRORS) as (keyof typeof ERRORS)[]
  t.same(
    codes.filter((code) => !rows.has(code)),
    [],
    'codes of src/errors.ts missing from the table',
  )
  t.same(
    [...rows.keys()].filter((code) => !(code in ERRORS)),
    [],
    'codes of the table that src/errors.ts does not have',
  )
  for (const code of codes)
    if (rows.has(code)) t.equal(rows.get(code), ERRORS[code].status, `${code}: the status of src/errors.ts`)
})
