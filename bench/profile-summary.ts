// Where a gateway's CPU time went, from a V8 CPU profile (BENCH_PROFILE=<dir> npm run bench:proxy):
// self time by package or project file, and the functions that took most.
// `npx tsx bench/profile-summary.ts <file.cpuprofile> [top] [--spans <spans.json> <label>]`: with
// --spans, only the samples taken within the spans of that label (bench:credit-cpu writes them).
import { readFileSync } from 'node:fs'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  hitCount?: number
  children?: number[]
}

interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
  /** µs of the monotonic clock. */
  startTime: number
}

const args = process.argv.slice(2)
const spansAt = args.indexOf('--spans')
const spansOf = spansAt === -1 ? null : { file: args[spansAt + 1], label: args[spansAt + 2] }
if (spansAt !== -1) args.splice(spansAt, 3)
const [file, topArg] = args
if (file === undefined || (spansOf !== null && (spansOf.file === undefined || spansOf.label === undefined))) {
  console.error('usage: tsx bench/profile-summary.ts <file.cpuprofile> [top] [--spans <spans.json> <label>]')
  process.exit(2)
}
const top = Number(topArg ?? 40)
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
/** Whether the sample taken at `at` (µs) counts: within one of the label's spans, when given. */
const counted: (at: number) => boolean = (() => {
  if (spansOf === null) return () => true
  const spans = (
    JSON.parse(readFileSync(spansOf.file!, 'utf8')) as { side: string; from: number; to: number }[]
  ).filter((span) => span.side === spansOf.label)
  if (spans.length === 0) throw new Error(`${spansOf.file}: no span of ${spansOf.label}`)
  console.log(
    `${spans.length} spans of ${spansOf.label}, ${(spans.reduce((sum, s) => sum + s.to - s.from, 0) / 1e6).toFixed(1)} s`,
  )
  return (at) => spans.some((span) => at >= span.from && at < span.to)
})()

/** The package (node_modules/<name>), the project's own file (dist/…), node's own, or V8's. */
function whereOf(url: string): string {
  if (url === '') return '(v8 / native)'
  if (url.startsWith('node:')) return url
  const modules = url.lastIndexOf('/node_modules/')
  if (modules !== -1) {
    const parts = url.slice(modules + '/node_modules/'.length).split('/')
    return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!
  }
  const dist = url.indexOf('/dist/')
  return dist === -1 ? url : `project: ${url.slice(dist + 1)}`
}

const byId = new Map(profile.nodes.map((node) => [node.id, node]))
const selfMicros = new Map<number, number>()
let at = profile.startTime
for (let i = 0; i < profile.samples.length; i++) {
  const id = profile.samples[i]!
  at += profile.timeDeltas[i] ?? 0
  if (!counted(at)) continue
  selfMicros.set(id, (selfMicros.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0))
}
let total = 0
const byWhere = new Map<string, number>()
const byFunction = new Map<string, number>()
for (const [id, micros] of selfMicros) {
  const frame = byId.get(id)!.callFrame
  total += micros
  if (frame.functionName === '(idle)') continue
  const where = whereOf(frame.url)
  byWhere.set(where, (byWhere.get(where) ?? 0) + micros)
  const name = `${frame.functionName || '(anonymous)'}  ${where === frame.url ? '' : `${where} `}${frame.url.split('/').pop()}:${frame.lineNumber + 1}`
  byFunction.set(name, (byFunction.get(name) ?? 0) + micros)
}
const idle = [...selfMicros].filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)')
const idleMicros = idle.reduce((sum, [, micros]) => sum + micros, 0)
const busy = total - idleMicros
const pct = (micros: number) => `${((100 * micros) / busy).toFixed(1).padStart(5)} %`
console.log(`${file}: ${(busy / 1e6).toFixed(2)} s busy of ${(total / 1e6).toFixed(2)} s sampled`)
console.log('\nself time by where the code lives (% of busy):')
for (const [where, micros] of [...byWhere].sort((a, b) => b[1] - a[1]).slice(0, 25))
  console.log(`${pct(micros)}  ${where}`)
console.log(`\nthe ${top} functions with most self time (% of busy):`)
for (const [name, micros] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, top))
  console.log(`${pct(micros)}  ${name}`)

// Inclusive time (the function and all it called) of the project's own functions: what each step
// and hook costs with the library calls it makes, for bench/README.md's per-step table.
const inclusive = new Map<number, number>()
function inclusiveOf(id: number): number {
  const known = inclusive.get(id)
  if (known !== undefined) return known
  const node = byId.get(id)!
  let sum = selfMicros.get(id) ?? 0
  for (const child of node.children ?? []) sum += inclusiveOf(child)
  inclusive.set(id, sum)
  return sum
}
const ownInclusive = new Map<string, number>()
/** Counts a project function once per stack: a recursive or re-entered call is not counted twice. */
function walk(id: number, open: Set<string>): void {
  const node = byId.get(id)!
  const frame = node.callFrame
  const where = whereOf(frame.url)
  let name: string | null = null
  if (where.startsWith('project: ')) {
    name = `${frame.functionName || '(anonymous)'}  ${where.slice('project: '.length)}:${frame.lineNumber + 1}`
    if (!open.has(name)) ownInclusive.set(name, (ownInclusive.get(name) ?? 0) + inclusiveOf(id))
  }
  const opened = name !== null && !open.has(name)
  if (opened) open.add(name!)
  for (const child of node.children ?? []) walk(child, open)
  if (opened) open.delete(name!)
}
walk(profile.nodes[0]!.id, new Set())
console.log(`\nthe project's ${top} functions with most inclusive time (% of busy):`)
for (const [name, micros] of [...ownInclusive].sort((a, b) => b[1] - a[1]).slice(0, top))
  console.log(`${pct(micros)}  ${name}`)
