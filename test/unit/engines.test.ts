// package.json's `engines` is a promise to whoever installs the gateway: every installed package
// must run on the oldest Node it names, or `npm ci` warns EBADENGINE on a Node the project claims.
import { readdirSync, readFileSync, existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import t from 'tap'

// semver comes with fastify (and npm itself); only its range check is needed.
const semver = createRequire(import.meta.url)('semver') as {
  minVersion(range: string): { version: string } | null
  satisfies(version: string, range: string): boolean
}

const root = join(import.meta.dirname, '../..')
const promised = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { engines: { node: string } }).engines
  .node

/** Every package.json under node_modules, nested ones included. */
function* installed(dir: string): Generator<{ name: string; version: string; engines?: { node?: string } }> {
  if (!existsSync(dir)) return
  for (const entry of readdirSync(dir)) {
    if (entry.startsWith('.')) continue
    const path = join(dir, entry)
    if (entry.startsWith('@')) {
      yield* installed(path)
      continue
    }
    const manifest = join(path, 'package.json')
    if (existsSync(manifest)) yield JSON.parse(readFileSync(manifest, 'utf8'))
    yield* installed(join(path, 'node_modules'))
  }
}

t.test("every installed package runs on the oldest Node that package.json's engines admits", async (t) => {
  const oldest = semver.minVersion(promised)?.version
  t.ok(oldest, `engines.node "${promised}" has a lowest version`)
  const refusing = [...installed(join(root, 'node_modules'))]
    .filter((pkg) => typeof pkg.engines?.node === 'string' && !semver.satisfies(oldest!, pkg.engines.node))
    .map((pkg) => `${pkg.name}@${pkg.version} wants node ${pkg.engines!.node}`)
  t.same(refusing, [], `no package refuses node ${oldest}`)
})
