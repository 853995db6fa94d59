// Keeps ioredis from slowing every string method call of the process (decision XXXX). ioredis 6's
// RESP3 decoder loads `class VerbatimString extends String` (built/resp/verbatim-string.js): once
// any object has String.prototype as its prototype, V8 turns String.prototype into a dictionary
// (it "optimizes it as a prototype") for good, and every `charCodeAt`, `slice`, `indexOf`… of the
// process, ours, fastify's, undici's, pino's, costs two to four times as much. ioredis never makes
// a VerbatimString as we run it (its type mapping decodes verbatim strings to a Buffer), so the
// module is given to ioredis as one whose class does not extend String, before ioredis loads it:
// imported by cache/ioredis.ts, the one place the gateway imports ioredis from, ahead of it.
import { createRequire, Module } from 'node:module'
import { dirname, join } from 'node:path'

const require = createRequire(import.meta.url)
const file = join(dirname(require.resolve('ioredis')), 'resp', 'verbatim-string.js')

/** ioredis's VerbatimString (a RESP3 verbatim string: its format, `txt` or `mkd`, and its text), as a plain class. */
class VerbatimString {
  readonly format: string
  readonly value: string
  constructor(format: string, value: string) {
    this.format = format
    this.value = value
  }
  toString(): string {
    return this.value
  }
  valueOf(): string {
    return this.value
  }
}

if (require.cache[file] === undefined) {
  const verbatim = new Module(file)
  verbatim.filename = file
  verbatim.loaded = true
  verbatim.exports = { __esModule: true, VerbatimString }
  require.cache[file] = verbatim
}
