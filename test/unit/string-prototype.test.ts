// Loading the gateway leaves String.prototype fast (src/cache/ioredis-verbatim.ts): ioredis's
// `class VerbatimString extends String` would turn it into a dictionary for good, and every
// string method call of the process would cost two to four times as much.
import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const PROBE = join(ROOT, 'test/fixtures/string-prototype-probe.ts')

t.test("the gateway's modules, loaded, leave String.prototype with fast properties", async (t) => {
  const printed = execFileSync(process.execPath, ['--allow-natives-syntax', ...RUN_TYPESCRIPT, PROBE], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  })
  t.equal(printed, 'true')
})

t.test('ioredis is imported only through src/cache/ioredis.ts, which replaces its VerbatimString first', async (t) => {
  const files = readdirSync(join(ROOT, 'src'), { recursive: true, encoding: 'utf8' })
    .filter((file) => /\.tsx?$/.test(file))
    .map((file) => join(ROOT, 'src', file))
  const importing = files.filter((file) =>
    /from 'ioredis'|import\('ioredis'\)|require\('ioredis'\)/.test(readFileSync(file, 'utf8')),
  )
  t.same(
    importing.map((file) => relative(ROOT, file)),
    ['src/cache/ioredis.ts'],
  )
})

t.test("ioredis's VerbatimString, as the gateway loads it, still reads as its text", async (t) => {
  await import('../../src/cache/ioredis.js')
  const require = createRequire(import.meta.url)
  const file = join(dirname(require.resolve('ioredis')), 'resp', 'verbatim-string.js')
  const { VerbatimString } = require(file) as {
    VerbatimString: new (format: string, value: string) => { format: string; value: string }
  }
  const verbatim = new VerbatimString('txt', 'some text')
  t.equal(verbatim.format, 'txt')
  t.equal(String(verbatim), 'some text')
  t.equal(`${verbatim}`, 'some text')
  t.notOk(verbatim instanceof String, "not a String: String.prototype is nobody else's prototype")
})
