// Mends postgres.js 3.4.9's write to a closed connection (porsager/postgres#1208, open as of
// 2026-11): a query written after its connection closed (a transaction's next statement, say)
// reaches `socket.write` on a null socket in a setImmediate, an uncaught TypeError that ends the
// process; and a teardown leaves the write timer set, so that the connection never writes again.
// Here the write settles the pending queries with CONNECTION_CLOSED instead, and teardown resets
// the timer (as the upstream pull requests #1209 and LanternOps/breeze#3225 do). And a query
// handed to a connection between its socket's error and its close (a turn of the event loop) was
// settled by neither: the close settles what is left whether or not an error came first. And a
// COPY TO whose stream was full when it ended or failed left the socket paused (only the stream's
// next read resumes it, and an ended stream has none), so that the connection never read the end
// of its COPY nor anything after: the end, or the error, resumes it. Run by
// `postinstall` and by the Dockerfile after its `npm ci --ignore-scripts`; idempotent. Plain
// JavaScript: the image's production install has no TypeScript runner.
// docs/decisions/0160-postgres-js-as-installed-mended-where-it-writes.md.
import { readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const PATCHED_VERSION = '3.4.9'
const MARK = '/* tenancy-gateway: porsager/postgres#1208 */'
const COPY_MARK = '/* tenancy-gateway: a COPY that ended full */'
const root = fileURLToPath(new URL('../node_modules/postgres/', import.meta.url))

/** [what, the 3.4.9 text, its replacement]: each must be found exactly once in every copy. */
const EDITS = [
  [
    'nextWrite on a closed connection',
    `  function nextWrite(fn) {
    const x = socket.write(chunk, fn)`,
    `  function nextWrite(fn) {
    if (!socket) { ${MARK}
      nextWriteTimer !== null && clearImmediate(nextWriteTimer)
      chunk = nextWriteTimer = null
      error(Errors.connection('CONNECTION_CLOSED', options))
      return false
    }
    const x = socket.write(chunk, fn)`,
  ],
  [
    "terminate's write timer",
    `    clearImmediate(nextWriteTimer)
    if (socket) {`,
    `    clearImmediate(nextWriteTimer)
    chunk = nextWriteTimer = null ${MARK}
    if (socket) {`,
  ],
  [
    "closed's pending queries",
    `    !hadError && (query || sent.length) && error(`,
    `    if (query || sent.length) ${MARK} error(`,
  ],
  [
    "closed's write timer",
    `    clearImmediate(nextWriteTimer)
    socket.removeListener('data', data)`,
    `    clearImmediate(nextWriteTimer)
    chunk = nextWriteTimer = null ${MARK}
    socket.removeListener('data', data)`,
  ],
  [
    "a COPY's end on a paused socket",
    `  function CopyDone() {
    stream && stream.push(null)
    stream = null`,
    `  function CopyDone() {
    stream && stream.push(null)
    stream = null
    socket.resume() ${COPY_MARK}`,
  ],
  [
    "a COPY's error on a paused socket",
    `  function errored(err) {
    stream && (stream.destroy(err), stream = null)`,
    `  function errored(err) {
    stream && (stream.destroy(err), stream = null, socket && socket.resume()) ${COPY_MARK}`,
  ],
]

function fail(message) {
  process.stderr.write(`patch-postgres: ${message}\n`)
  process.exit(1)
}

let version
try {
  version = JSON.parse(readFileSync(`${root}package.json`, 'utf8')).version
} catch {
  process.exit(0) // not installed (an install without it): nothing to mend
}
if (version !== PATCHED_VERSION)
  fail(
    `written for postgres ${PATCHED_VERSION}, found ${version}: check whether porsager/postgres#1208 is fixed there, ` +
      'then update scripts/patch-postgres.mjs or remove it (and its postinstall and Dockerfile lines)',
  )

for (const copy of ['src', 'cjs/src', 'cf/src']) {
  const file = `${root}${copy}/connection.js`
  const original = readFileSync(file, 'utf8')
  let text = original
  for (const [what, before, after] of EDITS) {
    if (text.includes(after)) continue // mended by an earlier run (one that may have had fewer edits)
    const at = text.indexOf(before)
    if (at === -1 || text.indexOf(before, at + 1) !== -1) fail(`${copy}/connection.js: ${what} not found once`)
    text = text.slice(0, at) + after + text.slice(at + before.length)
  }
  if (text !== original) writeFileSync(file, text)
}
