// Test files stay small enough to read and to run in parallel: none over 800 lines. A larger one is
// split by operation and outcome, its setup shared through test/helpers/ (CONTRIBUTING.md), as
// hostile-input-*.test.ts share test/helpers/hostile-deployment.ts.
import { readdirSync, readFileSync } from 'node:fs'
import { join, posix } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '..', '..')
const MAX_LINES = 800

/** Every *.test.ts under `folder`, as repository paths. */
function testFiles(folder: string): string[] {
  return readdirSync(join(ROOT, folder), { withFileTypes: true }).flatMap((entry) => {
    const path = posix.join(folder, entry.name)
    if (entry.isDirectory()) return testFiles(path)
    return entry.name.endsWith('.test.ts') ? [path] : []
  })
}

const files = testFiles('test')
const lineCount = (file: string) => readFileSync(join(ROOT, file), 'utf8').replace(/\n$/, '').split('\n').length

t.test(`no test file runs over ${MAX_LINES} lines`, async (t) => {
  t.ok(files.length > 100, `${files.length} test files read`)
  const over = files.flatMap((file) => {
    const lines = lineCount(file)
    return lines > MAX_LINES ? [`${file}: ${lines} lines`] : []
  })
  t.same(over, [], 'split these by operation and outcome, sharing setup through test/helpers/')
})
