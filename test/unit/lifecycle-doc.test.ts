// docs/lifecycle.md follows a request through the files that handle it: every `src/…` path it names
// exists, every bare file name (a step of src/proxy/steps/) is a file under src/, and the steps
// come in the order src/proxy/checks.ts runs them. A file moved or renamed, or a step added or
// reordered, fails here until the page says so (as architecture-doc.test.ts holds the file table).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join, posix } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '..', '..')
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8')

/** Every file under src/, as `src/…` paths. */
function sourceFiles(dir = 'src'): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = posix.join(dir, name)
    return statSync(join(ROOT, path)).isDirectory() ? sourceFiles(path) : [path]
  })
}

/** What the page names in backquotes: `src/…` paths, and bare file names (`slot.ts`). */
function namedPaths(markdown: string): { paths: string[]; bare: string[] } {
  const quoted = [...markdown.matchAll(/`([^`\s]+)`/g)].map((m) => m[1]!)
  return {
    paths: quoted.filter((name) => name.startsWith('src/')),
    bare: quoted.filter((name) => !name.includes('/') && /\.tsx?$/.test(name)),
  }
}

/** The files of PROXY_STEPS, in the order they run, each once. */
function stepFilesInOrder(checks: string): string[] {
  const fileOf = new Map<string, string>()
  for (const m of checks.matchAll(/import \{([^}]+)\} from '\.\/steps\/([^']+)\.js'/g))
    for (const name of m[1]!.split(',')) fileOf.set(name.trim(), `${m[2]}.ts`)
  const list = /PROXY_STEPS[^=]*=\s*\[([^\]]*)\]/.exec(checks)?.[1] ?? ''
  const files = [...list.matchAll(/(\w+)/g)].map((m) => fileOf.get(m[1]!) ?? `unknown ${m[1]}`)
  return files.filter((file, i) => files.indexOf(file) === i)
}

const page = read('docs/lifecycle.md')
const named = namedPaths(page)
const files = sourceFiles()

t.test('the page names files, and the reader finds them', async (t) => {
  t.same(namedPaths('`src/a.ts` then `b.ts`, `src/c/`, `GET /x`, `MAX`'), {
    paths: ['src/a.ts', 'src/c/'],
    bare: ['b.ts'],
  })
  t.ok(named.paths.length > 30, `the page names src/ paths (${named.paths.length})`)
})

t.test('every src/ path docs/lifecycle.md names exists', async (t) => {
  const missing = named.paths.filter((path) => !existsSync(join(ROOT, path)))
  t.same(missing, [], 'paths named in docs/lifecycle.md that are not in the repository')
})

t.test('every bare file name docs/lifecycle.md names is a file under src/', async (t) => {
  const missing = named.bare.filter((name) => !files.some((file) => posix.basename(file) === name))
  t.same(missing, [], 'file names in docs/lifecycle.md that no file under src/ has')
})

t.test("the page's steps come in src/proxy/checks.ts's order", async (t) => {
  const order = stepFilesInOrder(read('src/proxy/checks.ts'))
  t.ok(order.length > 10, `the steps were read (${order.length})`)
  const steps = new Set(readdirSync(join(ROOT, 'src/proxy/steps')))
  const shown = named.bare.filter((name, i) => steps.has(name) && named.bare.indexOf(name) === i)
  t.same(shown, order, 'the step files of docs/lifecycle.md, in order')
})
