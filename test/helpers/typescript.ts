// The node arguments that run a TypeScript entry in a process of its own, as `npm start` does: the
// project's loader (scripts/typescript.mjs), named by its absolute URL so any working directory will do.
export const RUN_TYPESCRIPT = ['--import', new URL('../../scripts/typescript.mjs', import.meta.url).href]
