// The Node the image runs (the Dockerfile's ARG NODE_IMAGE=node:<version>…), for the benches'
// servers (bench/lib.ts, BENCH_NODE), CI's tests (.ci/run) and the Dockerfile's smoke start
// (.ci/docker-replay.mjs): that version, or the newest of its major line up to it that the npm
// registry's node-<platform>-<arch> packages have, fetched once into
// node_modules/.cache/tgw-bench-node. Run directly (`tsx scripts/image-node.ts [<version> |
// --engines-floor]`, the Dockerfile's by default; the oldest package.json's `engines` allows), it
// prints the directory of that node binary, or fails saying why.
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const NODE_CACHE = resolve(ROOT, 'node_modules/.cache/tgw-bench-node')
const NODE_PACKAGE = `node-${process.platform}-${process.arch}`

export const versionOf = (path: string) => execFileSync(path, ['--version'], { encoding: 'utf8' }).trim()

/** The image's Node version (`26.11.1`), from `tree`'s Dockerfile. */
export function imageNodeVersion(tree = ROOT): string {
  const dockerfile = readFileSync(resolve(tree, 'Dockerfile'), 'utf8')
  const wanted = /^ARG NODE_IMAGE=node:(\d+\.\d+\.\d+)\b/m.exec(dockerfile)?.[1]
  if (wanted === undefined) throw new Error('Dockerfile: expected ARG NODE_IMAGE=node:<major.minor.patch>…')
  return wanted
}

/** The newest of `versions` in `wanted`'s major line that is not newer than it. */
function nearest(versions: string[], wanted: string): string | undefined {
  const parts = (v: string) => v.split('.').map(Number) as [number, number, number]
  const byVersion = (a: string, b: string) =>
    parts(a)[0] - parts(b)[0] || parts(a)[1] - parts(b)[1] || parts(a)[2] - parts(b)[2]
  const fits = (v: string) => /^\d+\.\d+\.\d+$/.test(v) && parts(v)[0] === parts(wanted)[0] && byVersion(v, wanted) <= 0
  return versions.filter(fits).sort(byVersion).at(-1)
}

/** The cached binary of `wanted`, else the registry's nearest (fetched into the cache), else the nearest cached. */
export function fetchNode(wanted: string): string {
  const binary = (v: string) => resolve(NODE_CACHE, `${NODE_PACKAGE}-${v}`, 'bin/node')
  const cached = (existsSync(NODE_CACHE) ? readdirSync(NODE_CACHE) : [])
    .map((entry) => entry.slice(NODE_PACKAGE.length + 1))
    .filter((v) => existsSync(binary(v)))
  if (cached.includes(wanted)) return binary(wanted)
  const npm = (args: string[], cwd?: string) => execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: 'pipe' })
  let chosen: string | undefined
  try {
    chosen = nearest([JSON.parse(npm(['view', NODE_PACKAGE, 'versions', '--json'])) as string[]].flat(), wanted)
  } catch (err) {
    chosen = nearest(cached, wanted)
    if (chosen === undefined) throw err
  }
  if (chosen === undefined) throw new Error(`${NODE_PACKAGE} has no release of ${wanted}'s line up to it`)
  if (!existsSync(binary(chosen))) {
    // Unpacked beside its place in the cache and renamed into it, so that a binary there is whole.
    mkdirSync(NODE_CACHE, { recursive: true })
    const work = mkdtempSync(resolve(NODE_CACHE, '.fetch-'))
    try {
      execFileSync('tar', ['xzf', npm(['pack', `${NODE_PACKAGE}@${chosen}`, '--silent'], work).trim()], { cwd: work })
      renameSync(resolve(work, 'package'), resolve(NODE_CACHE, `${NODE_PACKAGE}-${chosen}`))
    } finally {
      rmSync(work, { recursive: true, force: true })
    }
  }
  return binary(chosen)
}

/** The oldest Node package.json's `engines` allows (`>=22.12` is `22.12.0`). */
export function enginesFloorVersion(tree = ROOT): string {
  const range = (JSON.parse(readFileSync(resolve(tree, 'package.json'), 'utf8')) as { engines?: { node?: string } })
    .engines?.node
  const floor = /^>=\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?$/.exec(range ?? '')
  if (floor === null)
    throw new Error(`package.json: expected engines.node ">=<major>[.<minor>[.<patch>]]", not ${range}`)
  return `${floor[1]}.${floor[2] ?? 0}.${floor[3] ?? 0}`
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const asked = process.argv[2]
    const path = fetchNode(asked === '--engines-floor' ? enginesFloorVersion() : (asked ?? imageNodeVersion()))
    console.log(dirname(path))
  } catch (err) {
    console.error(`the image's node could not be had: ${(err as Error).message}`)
    process.exitCode = 1
  }
}
