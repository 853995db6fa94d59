// docs/architecture.md's table "Which file owns what" names every source file, and names none that
// is gone: a stranger looking for where a concern lives finds it there (as openapi.test.ts keeps
// the routes and the document together).
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, posix } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '..', '..')

/** Every file under src/, as `src/…` paths. */
function sourceFiles(dir = 'src'): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = posix.join(dir, name)
    return statSync(join(ROOT, path)).isDirectory() ? sourceFiles(path) : [path]
  })
}

/**
 * The names in the first cell of each row of the table: `src/limits/rate-limit.ts`, `quota-limit.ts`
 * (a name without a folder is in the folder of the first), a folder (`src/console/ui/`) or a glob
 * (`src/store/migrations/*.sql`).
 */
function tableEntries(): string[] {
  const doc = readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8')
  const section = doc.split('## Which file owns what')[1]?.split('\n## ')[0] ?? ''
  return section
    .split('\n')
    .filter((line) => line.startsWith('| `src/'))
    .flatMap((line) => {
      const names = [...line.split(' | ')[0]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!)
      const folder = posix.dirname(names[0]!)
      return names.map((name) => (name.includes('/') ? name : posix.join(folder, name)))
    })
}

const entries = tableEntries()
const covers = (entry: string, file: string) =>
  entry.endsWith('/')
    ? file.startsWith(entry)
    : entry.includes('*')
      ? posix.dirname(file) === posix.dirname(entry) && file.endsWith(posix.basename(entry).replace('*', ''))
      : file === entry

t.test('every file under src/ has its row', async (t) => {
  t.ok(entries.length > 50, 'the table was found')
  const missing = sourceFiles().filter((file) => !entries.some((entry) => covers(entry, file)))
  t.same(missing, [], 'files missing from docs/architecture.md, "Which file owns what"')
})

t.test('every row names a file or folder that exists', async (t) => {
  const files = sourceFiles()
  const stale = entries.filter((entry) => !files.some((file) => covers(entry, file)))
  t.same(stale, [], 'rows of docs/architecture.md that name nothing under src/')
})
