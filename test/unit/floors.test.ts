// docs/architecture.md's "Floors": every file under src/ imports only files of its own floor or
// below, no files import each other in a circle, and neither do folders. Type-only imports count:
// a type from above ties a file to what stands above it as surely as a value does.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, posix } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '..', '..')
const doc = readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8')
const section = doc.split('## Floors: who may import whom')[1]?.split('\n## ')[0] ?? ''

function sourceFiles(dir = 'src'): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = posix.join(dir, name)
    if (statSync(join(ROOT, path)).isDirectory()) return sourceFiles(path)
    return /\.tsx?$/.test(name) && !name.endsWith('.d.ts') ? [path] : []
  })
}

const files = sourceFiles()
const known = new Set(files)

/** The floors' table: each entry (a file, or a folder ending in `/`) with its floor's number. */
const floorEntries: { entry: string; floor: number }[] = section
  .split('\n')
  .filter((line) => /^\| \d /.test(line))
  .flatMap((line) => {
    const floor = Number(line.slice(2, line.indexOf(' ', 2)))
    const files = line.split(' | ')[2] ?? ''
    return [...files.matchAll(/`(src\/[^`]+)`/g)].map((m) => ({ entry: m[1]!, floor }))
  })

const covers = (entry: string, file: string) => (entry.endsWith('/') ? file.startsWith(entry) : file === entry)

/** The floor of the longest entry that names the file; the top floor for one no entry names. */
function floorOf(file: string): number {
  let best: { entry: string; floor: number } | null = null
  for (const candidate of floorEntries)
    if (covers(candidate.entry, file) && (best === null || candidate.entry.length > best.entry.length)) best = candidate
  return best?.floor ?? Math.max(...floorEntries.map((e) => e.floor))
}

/** The files of src/ that `file` imports: static, type-only and re-exports, and import() of a path. */
function importsOf(file: string): string[] {
  const text = readFileSync(join(ROOT, file), 'utf8')
  const specifiers = [
    ...text.matchAll(/^\s*(?:import|export)\b[^'"]*?\bfrom\s+['"](\.{1,2}\/[^'"]+)['"]/gm),
    ...text.matchAll(/^\s*import\s+['"](\.{1,2}\/[^'"]+)['"]/gm),
    ...text.matchAll(/\bimport\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!)
  return specifiers.flatMap((specifier) => {
    const target = posix.normalize(posix.join(posix.dirname(file), specifier))
    const candidates = [target.replace(/\.js$/, '.ts'), target.replace(/\.js$/, '.tsx'), target]
    const found = candidates.find((c) => known.has(c))
    return found === undefined ? [] : [found]
  })
}

const edges = new Map(files.map((file) => [file, [...new Set(importsOf(file))]]))

t.test('the floors are declared, and every file stands on one', async (t) => {
  t.ok(floorEntries.length >= 20, 'the table of floors was found')
  const stale = floorEntries.filter(({ entry }) => !files.some((file) => covers(entry, file)))
  t.same(stale, [], 'entries of the floors table that name nothing under src/')
})

t.test('no import climbs to a higher floor', async (t) => {
  const climbing = [...edges].flatMap(([from, tos]) =>
    tos.filter((to) => floorOf(to) > floorOf(from)).map((to) => `${from} → ${to}`),
  )
  t.same(
    climbing,
    [],
    'imports from a lower floor to a higher one (move the shared piece down, docs/architecture.md "Floors")',
  )
})

/** The circles of a graph: strongly connected components of more than one node (Tarjan). */
function circles(graph: Map<string, string[]>): string[][] {
  let index = 0
  const order = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const found: string[][] = []
  const visit = (file: string): void => {
    order.set(file, index)
    low.set(file, index++)
    stack.push(file)
    onStack.add(file)
    for (const to of graph.get(file) ?? []) {
      if (!order.has(to)) {
        visit(to)
        low.set(file, Math.min(low.get(file)!, low.get(to)!))
      } else if (onStack.has(to)) low.set(file, Math.min(low.get(file)!, order.get(to)!))
    }
    if (low.get(file) !== order.get(file)) return
    const component: string[] = []
    let member: string
    do {
      member = stack.pop()!
      onStack.delete(member)
      component.push(member)
    } while (member !== file)
    if (component.length > 1) found.push(component.sort())
  }
  for (const file of graph.keys()) if (!order.has(file)) visit(file)
  return found
}

t.test('no files import each other in a circle', async (t) => {
  t.same(
    circles(edges).map((c) => c.join(', ')),
    [],
    'circles of imports (break them: docs/architecture.md "Floors")',
  )
})

/** A file's folder under src/ (`src/auth/`), or the file itself when it stands in src/. */
const folderOf = (file: string) => {
  const parts = file.split('/')
  return parts.length > 2 ? `${parts[0]}/${parts[1]}/` : file
}

t.test('no folders import each other in a circle', async (t) => {
  const folders = new Map<string, string[]>()
  for (const [from, tos] of edges) {
    const targets = folders.get(folderOf(from)) ?? []
    for (const to of tos) if (folderOf(to) !== folderOf(from)) targets.push(folderOf(to))
    folders.set(folderOf(from), targets)
  }
  const found = circles(folders).map((circle) => {
    const members = new Set(circle)
    const arrows = [...edges].flatMap(([from, tos]) =>
      tos
        .filter((to) => members.has(folderOf(from)) && members.has(folderOf(to)) && folderOf(from) !== folderOf(to))
        .map((to) => `${from} → ${to}`),
    )
    return `${circle.join(', ')}: ${arrows.join('; ')}`
  })
  t.same(found, [], 'folders that import each other around a circle (docs/architecture.md "Floors")')
})

t.test('the reader of imports finds what it should', async (t) => {
  // Held on files whose imports are known, so that a reader that finds nothing cannot pass.
  t.ok(edges.get('src/app.ts')!.includes('src/app-options.ts'), "app.ts's imports are read")
  t.ok(edges.get('src/auth/authenticate.ts')!.includes('src/auth/access-tokens.ts'), 'so are plain imports')
  t.equal(floorOf('src/shared/scopes.ts'), 0)
  t.equal(floorOf('src/auth/mint.ts'), 4)
  t.equal(floorOf('src/main.ts'), 7, 'a file no entry names stands at the top')
  t.equal(folderOf('src/auth/mint.ts'), 'src/auth/')
  t.equal(folderOf('src/proxy/steps/slot.ts'), 'src/proxy/')
  t.equal(folderOf('src/app.ts'), 'src/app.ts')
  t.ok(dirname(ROOT) !== ROOT)
})
