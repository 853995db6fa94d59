// How the tests load TypeScript: Node strips the types itself (the code is erasable syntax only,
// tsconfig.json's erasableSyntaxOnly), and this hook, run in the loading thread, maps the `.js` of
// a relative import to the `.ts` (or `.tsx`) file beside it, as tsc resolves it. It costs a test
// file about half the start-up of tsx's hooks, which run on a thread of their own.
import { existsSync } from 'node:fs'
import { registerHooks } from 'node:module'
import { fileURLToPath } from 'node:url'

registerHooks({
  resolve(specifier, context, nextResolve) {
    if (specifier.endsWith('.js') && specifier.startsWith('.') && context.parentURL?.startsWith('file:')) {
      const base = new URL(specifier, context.parentURL).href.slice(0, -'.js'.length)
      for (const extension of ['.ts', '.tsx'])
        if (existsSync(fileURLToPath(base + extension))) return nextResolve(base + extension, context)
    }
    return nextResolve(specifier, context)
  },
})
