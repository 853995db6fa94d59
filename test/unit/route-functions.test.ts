// Routes as data (docs/architecture.md, Where a new feature goes): no function of src/ that
// registers routes runs over 60 lines. An API's operations are entries of its tables
// (management/operation-table.ts), registered by one loop; a function that registers routes one
// by one, by hand, grows with each operation, and this test stops it at 60 lines.
//
// Read from the text, as biome formats it: a top-level function (a declaration, or a const
// holding an arrow or function expression) ends at the first `}` in column 0 after it. It
// registers routes when its name says so (`register…`, `…Routes`) or when it calls
// `x.get('/…', …)`, `x.post(SOME_PATH, …)`, `x.route(…)` and the like.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, posix } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '..', '..')
export const ROUTE_FUNCTION_LINES_MAX = 60

function sourceFiles(root: string, dir = 'src'): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = posix.join(dir, name)
    if (statSync(join(root, path)).isDirectory()) return sourceFiles(root, path)
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : []
  })
}

const FUNCTION_START = [
  /^(?:export )?(?:default )?(?:async )?function\*? (\w+)/,
  /^(?:export )?(?:const|let) (\w+)(?:: [^=]+)? =(?: (?:async )?(?:function\b|\(|<|\w+ =>)|$)/,
]
const ROUTE_NAME = /^register|Routes?$/
const ROUTE_CALL = [
  // app.get('/x', …), app.post(`${PREFIX}/x`, …), app.patch(SOME_PATH, …): a path, then more arguments
  /\.(?:get|post|put|patch|delete|head|options|all)(?:<[^>]*>)?\((?:'\/[^']*',|`[$/][^`]*`,|[A-Z][A-Z0-9_]+,)/,
  // app.post(\n  '/x', …: the arguments on the lines below
  /\.(?:get|post|put|patch|delete|head|options|all)(?:<[^>]*>)?\($/,
  /\.route\(/,
]

export interface TopFunction {
  file: string
  name: string
  line: number
  lines: number
  registersRoutes: boolean
}

/** The top-level functions of `file`, each with its length in lines. */
export function topFunctions(root: string, file: string): TopFunction[] {
  const lines = readFileSync(join(root, file), 'utf8').split('\n')
  const found: TopFunction[] = []
  for (let i = 0; i < lines.length; i++) {
    const name = FUNCTION_START.map((re) => re.exec(lines[i]!)?.[1]).find((n) => n !== undefined)
    if (name === undefined) continue
    // Its header runs on to the line that opens its body (`) {`, `=> {`, `): T {`): then it ends at
    // the next `}` in column 0. A blank line or another line in column 0 first: an expression body.
    let end = i
    let block = false
    for (let j = i; j < lines.length; j++) {
      const line = lines[j]!.trimEnd()
      if (j > i && (line === '' || (/^\S/.test(line) && !line.startsWith(')')))) break
      end = j
      if (/(?:=>|[\w)>\]]) \{$|=> \(\{$/.test(line)) {
        block = true
        break
      }
    }
    if (block) {
      end += 1
      while (end < lines.length && !lines[end]!.startsWith('}')) end++
    }
    const body = lines.slice(i, end + 1)
    const registersRoutes = ROUTE_NAME.test(name) || body.some((line) => ROUTE_CALL.some((re) => re.test(line)))
    found.push({ file, name, line: i + 1, lines: end - i + 1, registersRoutes })
    i = end
  }
  return found
}

/** Every function of `root`'s src/ that registers routes, longest first. */
export function routeFunctions(root: string): TopFunction[] {
  return sourceFiles(root)
    .flatMap((file) => topFunctions(root, file))
    .filter((f) => f.registersRoutes)
    .sort((a, b) => b.lines - a.lines)
}

t.test(`no function that registers routes runs over ${ROUTE_FUNCTION_LINES_MAX} lines`, async (t) => {
  const functions = routeFunctions(ROOT)
  t.ok(functions.length >= 5, `the route-registering functions are found (${functions.length})`)
  for (const f of functions.slice(0, 5)) t.comment(`${f.lines} lines: ${f.name} (${f.file}:${f.line})`)
  const long = functions.filter((f) => f.lines > ROUTE_FUNCTION_LINES_MAX)
  t.same(
    long.map((f) => `${f.file}:${f.line} ${f.name} (${f.lines} lines)`),
    [],
    'an operation is an entry of its resource table (management/operation-table.ts), not a call in a long function',
  )
})

t.test('the scan measures a function as biome writes it', async (t) => {
  const functions = topFunctions(ROOT, 'test/unit/route-functions.test.ts')
  const scan = functions.find((f) => f.name === 'topFunctions')
  t.ok(scan !== undefined && scan.lines > 20 && scan.lines < 60, `topFunctions is measured (${scan?.lines} lines)`)
  t.equal(
    functions.find((f) => f.name === 'ROUTE_FUNCTION_LINES_MAX'),
    undefined,
    'a constant is no function',
  )
})
