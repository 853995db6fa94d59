// Runs the project's TypeScript as it is (`node --import ./scripts/typescript.mjs file.ts`): on a
// Node that strips types itself (22.18 and later), only the `.js` of an import is mapped to the
// `.ts` beside it, in the loading thread; elsewhere, tsx does it all. Node's own way needs no
// transpiler, no source maps and no loader thread, so a process starts in about two thirds of the CPU
// time: the suite starts hundreds. Compiled code is cached between processes (enableCompileCache),
// but not under coverage (tap's, or NODE_V8_COVERAGE): functions read from that cache report no
// branches.
// The stripped text is kept too (`stripped`, below), which coverage does not mind.
// The code is written for it: erasable syntax only, type imports marked (tsconfig.json).
import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import module from 'node:module'

const nodeStripsTypes = Boolean(process.features.typescript) && typeof module.registerHooks === 'function'

const underCoverage = process.env._TAPJS_PROCESSINFO_COVERAGE_ === '1' || Boolean(process.env.NODE_V8_COVERAGE)

if (nodeStripsTypes) {
  if (!underCoverage) module.enableCompileCache?.()
  module.registerHooks({
    resolve(specifier, context, nextResolve) {
      // `./x.js` written in a `.ts` file names `./x.ts` (the NodeNext convention tsc checks).
      if (context.parentURL?.endsWith('.ts') && specifier.endsWith('.js') && /^\.{1,2}\//.test(specifier)) {
        try {
          return nextResolve(`${specifier.slice(0, -3)}.ts`, context)
        } catch {
          // a real .js file: resolved below as written
        }
      }
      return nextResolve(specifier, context)
    },
    load(url, context, nextLoad) {
      if (!url.startsWith('file:') || !url.endsWith('.ts') || url.includes('/node_modules/'))
        return nextLoad(url, context)
      return { format: 'module', source: stripped(readFileSync(new URL(url), 'utf8')), shortCircuit: true }
    },
  })
} else {
  // tsx puts the TypeScript text into its source maps, which tap's coverage reads, only when this
  // is set (privatenumber/tsx#558); otherwise c8 counts every loaded file as wholly covered. Node
  // then also writes its own report of each process there, which nothing reads.
  if (underCoverage && !process.env.NODE_V8_COVERAGE)
    process.env.NODE_V8_COVERAGE = new URL('../.tap/v8-coverage', import.meta.url).pathname
  await import('tsx')
}

/**
 * The project's TypeScript as Node strips it (spaces where the types were, so that every position,
 * and coverage, stays the file's), kept by content between processes: Node's own stripping loads
 * and runs a WebAssembly transpiler in every process, about 0.13 CPU-s of each test file's start.
 */
export function stripped(source, dir = new URL('../node_modules/.cache/tgw-stripped/', import.meta.url)) {
  const file = new URL(`${createHash('sha256').update(source).digest('hex').slice(0, 40)}.js`, dir)
  try {
    return readFileSync(file, 'utf8')
  } catch {
    // Not stripped yet: once here, written whole (renamed into place) for every later process.
  }
  // stripTypeScriptTypes warns that it is experimental, on stderr, which tests of a spawned
  // gateway's output read: what it strips is what Node strips when it runs a .ts file itself.
  const emitWarning = process.emitWarning
  process.emitWarning = () => {}
  let js
  try {
    js = module.stripTypeScriptTypes(source)
  } finally {
    process.emitWarning = emitWarning
  }
  try {
    mkdirSync(dir, { recursive: true })
    const partial = new URL(`${file.pathname}.${process.pid}`, 'file:')
    writeFileSync(partial, js)
    renameSync(partial, file)
  } catch {
    // A read-only node_modules: this process runs on what it stripped, the next strips again.
  }
  return js
}
