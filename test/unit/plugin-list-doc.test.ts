// The docs' list of what buildApp registers ("registers, in this order: …", in docs/internals.md
// today) names, in order, the file of every plugin src/app.ts registers, and no other: a plugin
// added to the app and not to the list, or listed and gone, fails here.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '..', '..')
const LIST_START = 'registers, in this order:'
const LIST_END = 'It decorates'

/** The files the list names in backticks (`http/parsing.ts`), in order, and the doc that holds it. */
function listed(): { doc: string; files: string[] } {
  const holders = readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => ({ doc: `docs/${name}`, text: readFileSync(join(ROOT, 'docs', name), 'utf8') }))
    .filter(({ text }) => text.includes(LIST_START))
  if (holders.length !== 1) throw new Error(`one doc should hold "${LIST_START}", found ${holders.length}`)
  const { doc, text } = holders[0]!
  const list = text.slice(text.indexOf(LIST_START)).split(LIST_END)[0]!
  const files = [...list.matchAll(/`([\w-]+\/[\w./-]+\.ts)`/g)].map((m) => `src/${m[1]}`)
  return { doc, files }
}

/** The files of what buildApp registers (`app.register(x)`, and `registerOpenApi(app)`), in order. */
function registered(source: string): string[] {
  const imports = new Map<string, string>()
  for (const m of source.matchAll(/import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+'\.\/([^']+)\.js'/g))
    for (const name of m[1]!.split(',').map((n) => n.replace(/^\s*type\s+/, '').trim()))
      if (name !== '') imports.set(name, `src/${m[2]}.ts`)
  const body = source.slice(source.indexOf('export async function buildApp'))
  return [...body.matchAll(/app\.register\((\w+)|\b(registerOpenApi)\(app\)/g)].map((m) => {
    const name = (m[1] ?? m[2])!
    const file = imports.get(name)
    if (file === undefined) throw new Error(`${name} is registered but not imported from a file of src/`)
    return file
  })
}

t.test('the docs list every plugin buildApp registers, in its order, and nothing else', async (t) => {
  const { doc, files } = listed()
  const app = registered(readFileSync(join(ROOT, 'src', 'app.ts'), 'utf8'))
  t.ok(app.length >= 20, 'app.ts is read')
  t.same(
    app.filter((file) => !files.includes(file)),
    [],
    `registered in src/app.ts but not listed in ${doc}`,
  )
  t.same(
    files.filter((file) => !app.includes(file)),
    [],
    `listed in ${doc} but not registered in src/app.ts`,
  )
  t.same(files, app, `${doc} lists them in the order they are registered`)
})

t.test('the readers find what they should', async (t) => {
  const source = `import { a } from './x/a.js'\nimport { type B, b } from './y/b.js'\nexport async function buildApp() {\n  await app.register(a)\n  await registerOpenApi(app)\n  await app.register(b, {})\n}`
  t.throws(() => registered(source), /registerOpenApi is registered but not imported/)
  t.same(registered(source.replace('{ type B, b }', '{ type B, b, registerOpenApi }')), [
    'src/x/a.ts',
    'src/y/b.ts',
    'src/y/b.ts',
  ])
})
