// The code, tests, benchmarks and docs cite the project's own docs (docs/api.md, docs/events.md, …),
// never a contract file outside the repository: a stranger can open every rule that a comment names.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, posix } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '..', '..')
const SELF = 'test/unit/own-docs.test.ts'
const WALKED = ['src', 'test', 'bench', 'docs', 'scripts', 'README.md', 'CHANGELOG.md']

/** Every file under `path` (a folder or a file), as repository paths. */
function files(path: string): string[] {
  if (!statSync(join(ROOT, path)).isDirectory()) return [path]
  return readdirSync(join(ROOT, path)).flatMap((name) => (name === 'node_modules' ? [] : files(posix.join(path, name))))
}

/** The file's lines, or none for a binary file (a NUL byte: the console's screenshots). */
function lines(file: string): string[] {
  const bytes = readFileSync(join(ROOT, file))
  return bytes.includes(0) ? [] : bytes.toString('utf8').split('\n')
}

const cited = WALKED.flatMap(files)
  .filter((file) => file !== SELF)
  .flatMap((file) =>
    lines(file).flatMap((line, i) => (/\bDESIGN\b/.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : [])),
  )

t.test('no file cites an outside DESIGN document', async (t) => {
  t.same(cited, [], 'lines to cite docs/ instead')
})
