// The README is what a first visit needs: the two commands first (run the gateway, run the tests),
// the quickstart, then links into docs/. Everything else lives in docs/, and this keeps it so.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'

const README = readFileSync(join(import.meta.dirname, '..', '..', 'README.md'), 'utf8')
const MOST_LINES = 180

t.test('the README opens with the two commands: the gateway, then the tests', async (t) => {
  const first = /```sh\n(.*)\n(.*)\n```/.exec(README)
  t.ok(first !== null && README.indexOf(first[0]) < README.indexOf('\n## '), 'a sh block before the first section')
  t.match(first?.[1], /^npm ci && npm start\b/)
  t.match(first?.[2], /^npm ci && npm test\b/)
})

t.test(`the README stays within ${MOST_LINES} lines`, async (t) => {
  const lines = README.trimEnd().split('\n').length
  t.ok(lines <= MOST_LINES, `${lines} lines: move detail to docs/ and link it`)
})
