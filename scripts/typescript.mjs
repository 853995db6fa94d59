// Runs the project's TypeScript as it is (`node --import ./scripts/typescript.mjs file.ts`): on a
// Node that strips types itself (22.18 and later), only the `.js` of an import is mapped to the
// `.ts` beside it, in the loading thread; elsewhere, tsx does it all. Node's own way needs no
// transpiler, no source maps and no loader thread, so a process starts in about two thirds of the CPU
// time: the suite starts hundreds. Compiled code is cached between processes (enableCompileCache),
// but not under coverage (NODE_V8_COVERAGE): functions read from that cache report no branches.
// The code is written for it: erasable syntax only, type imports marked (tsconfig.json).
import module from 'node:module'

const nodeStripsTypes = Boolean(process.features.typescript) && typeof module.registerHooks === 'function'

if (nodeStripsTypes) {
  if (!process.env.NODE_V8_COVERAGE) module.enableCompileCache?.()
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
  })
} else {
  await import('tsx')
}
