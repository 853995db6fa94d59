// The loader's cache of stripped TypeScript (scripts/typescript.mjs,
// docs/decisions/0310-typescript-runs-on-nodes-own-type-stripping-tsx.md): kept by content for
// later processes, and never a reason to fail where it cannot be written.
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import module from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import t from 'tap'

const LOADER = new URL('../../scripts/typescript.mjs', import.meta.url).href
const { stripped } = (await import(LOADER)) as { stripped(source: string, dir: URL): string }

const SOURCE = 'const answer: number = 42\nexport { answer }\n'
const JS = 'const answer         = 42\nexport { answer }\n'
// Where Node strips no types (before 22.18), tsx runs the TypeScript and this cache is not used.
const skip = typeof module.stripTypeScriptTypes !== 'function' && 'this Node strips no types: tsx runs instead'

t.test('the stripped text is written once, then read back by content', { skip }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tgw-stripped-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const cache = pathToFileURL(`${dir}/`)
  t.equal(stripped(SOURCE, cache), JS)
  const files = readdirSync(dir)
  t.equal(files.length, 1, 'one file, no partial one left beside it')
  // What a later process reads is the cached text, not a second stripping.
  writeFileSync(join(dir, files[0]!), '// from the cache\n')
  t.equal(stripped(SOURCE, cache), '// from the cache\n')
  t.equal(stripped(`${SOURCE}\n`, cache), `${JS}\n`, 'other content is another entry')
  t.equal(readdirSync(dir).length, 2)
})

t.test('a cache that cannot be written: the text is stripped all the same', { skip }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tgw-stripped-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  // A folder under a regular file cannot be made, not even by root (a read-only node_modules).
  writeFileSync(join(dir, 'file'), '')
  t.equal(stripped(SOURCE, pathToFileURL(`${dir}/file/cache/`)), JS)
})
