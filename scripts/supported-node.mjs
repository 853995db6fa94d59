// The Node `npm start`, `npm run cli` and the test scripts run on (`node --import
// ./scripts/supported-node.mjs …`, first of the imports): on a Node package.json's `engines`
// allows, nothing. On an older one (a fresh Debian or Ubuntu has Node 20), the same command runs
// again on the image's Node, fetched once by scripts/image-node.ts into node_modules/.cache, with
// its directory first on the PATH so that what the command spawns runs on it too; this process
// waits for it, passes signals on, and exits as it does. When that Node cannot be had, it stops
// at once with one line saying how to get a supported one. Plain JavaScript: it runs before any
// TypeScript loader, on any Node.
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { delimiter } from 'node:path'
import { fileURLToPath } from 'node:url'

const IMAGE_NODE = fileURLToPath(new URL('./image-node.ts', import.meta.url))
const TYPESCRIPT = new URL('./typescript.mjs', import.meta.url).href

/** `22.12.0` and the like, compared part by part: negative when `a` is older than `b`. */
export function compareVersions(a, b) {
  const pa = a.replace(/^v/, '').split('.').map(Number)
  const pb = b.replace(/^v/, '').split('.').map(Number)
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0)
  return 0
}

/** The oldest Node package.json's `engines.node` (`>=22.12`) allows: `22.12.0`. */
export function enginesFloor(packageJson = new URL('../package.json', import.meta.url)) {
  const range = JSON.parse(readFileSync(packageJson, 'utf8')).engines?.node ?? ''
  const floor = /^>=\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?$/.exec(range)
  if (floor === null)
    throw new Error(`package.json: expected engines.node ">=<major>[.<minor>[.<patch>]]", not ${range}`)
  return `${floor[1]}.${floor[2] ?? 0}.${floor[3] ?? 0}`
}

/** The directory of the image's Node, as `tsx scripts/image-node.ts` prints it; throws its reason. */
function imageNodeDir() {
  try {
    return execFileSync(process.execPath, ['--import', TYPESCRIPT, IMAGE_NODE], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    }).trim()
  } catch (err) {
    throw new Error(String(err.stderr ?? err.message).trim() || 'scripts/image-node.ts failed')
  }
}

/**
 * What to do on `version`: `{ run: null }` when it is at `floor` or later; `{ run: dir, say }` to
 * run again on the Node in `dir`; `{ stop: line }` when none newer can be had (`findNode` throws,
 * or finds one below the floor too). `findNode` returns a directory holding `node`.
 */
export function decide(version, floor, findNode = imageNodeDir, versionIn = nodeVersionIn) {
  if (compareVersions(version, floor) >= 0) return { run: null }
  const why = `node ${version} is older than package.json's engines (>=${floor})`
  const howTo = `install Node ${floor} or later (\`nvm install 26\`, say) and run it again`
  let dir
  let found
  try {
    dir = findNode()
    found = versionIn(dir)
  } catch (err) {
    return { stop: `${why}, and the image's Node could not be fetched (${err.message.split('\n')[0]}): ${howTo}` }
  }
  if (compareVersions(found, floor) < 0)
    return { stop: `${why}, and the image's Node (${found}, in ${dir}) is older too: ${howTo}` }
  return { run: dir, say: `${why}: running on node ${found} instead (the image's line; scripts/image-node.ts, ${dir})` }
}

function nodeVersionIn(dir) {
  return execFileSync(`${dir}/node`, ['--version'], { encoding: 'utf8' }).trim()
}

// Only when preloaded (`--import`), not when a test imports the functions above.
const preloaded = process.execArgv.some((arg) => arg.includes('supported-node.mjs'))
if (preloaded) {
  const decision = decide(process.version, enginesFloor())
  if (decision.stop !== undefined) {
    console.error(decision.stop)
    process.exit(1)
  }
  if (decision.run !== null) {
    console.error(decision.say)
    const { foregroundChild } = await import('foreground-child')
    const env = { ...process.env, PATH: `${decision.run}${delimiter}${process.env.PATH ?? ''}` }
    // The same arguments, on the other Node; foregroundChild passes signals on and exits as it does.
    foregroundChild(`${decision.run}/node`, [...process.execArgv, ...process.argv.slice(1)], { env })
    // The command itself never runs here.
    await new Promise(() => {})
  }
}
