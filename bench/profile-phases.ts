// Where a proxy's time goes by phase of an exchange, side by side for several CPU profiles
// (BENCH_PROFILE=<dir> npm run bench:proxy), in µs a request: the floor's beside the gateway's
// tells which phase holds the difference, and how much of it is the kernel's socket writes.
// `npx tsx bench/profile-phases.ts <file.cpuprofile>=<requests> [<file>=<requests> …]`: each
// profile with the requests its process served (warm-up included; at BENCH_RATE, rate × seconds).
// PHASES_OTHER=<depth> also lists what the last profile spent in no phase.
import { readFileSync } from 'node:fs'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string }
  children?: number[]
}

interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

/** A phase, told by a frame on the sample's stack: the first rule (in this order) that matches wins. */
const PHASES: readonly { name: string; matches: (functionName: string, url: string) => boolean }[] = [
  { name: 'start-up (modules, plugins)', matches: (_f, u) => u.includes('run_main') || u.includes('module_job') },
  {
    name: 'request in (routing, steps, dispatch)',
    matches: (f, u) => f === 'parserOnIncoming' && u === 'node:_http_server',
  },
  { name: 'request head written upstream', matches: (f, u) => f === 'write' && u.endsWith('client-h1.js') },
  { name: 'answer (head, body, end)', matches: (f, u) => f === 'onHttpSocketReadable' && u.endsWith('client-h1.js') },
  { name: 'after the answer (finish listeners)', matches: (f, u) => f === 'onFinish' && u === 'node:_http_outgoing' },
  { name: 'garbage collector', matches: (f) => f === '(garbage collector)' },
  { name: '(program): native, outside JavaScript', matches: (f) => f === '(program)' },
]
const OTHER = 'other'
/** The socket writes' system calls: the kernel's share, which more JavaScript does not change. */
const WRITES = new Set(['writev', 'writeLatin1String', 'writeUtf8String', 'writeBuffer'])

/** µs a request of each phase, and of its writes, in one profile. */
function phasesOf(file: string, requests: number): Map<string, { all: number; writes: number }> {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const parentOf = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id)
  const phaseOfNode = new Map<number, string>()
  const phaseOf = (id: number): string => {
    const known = phaseOfNode.get(id)
    if (known !== undefined) return known
    const { functionName, url } = byId.get(id)!.callFrame
    const own = PHASES.find((phase) => phase.matches(functionName, url))?.name
    const parent = parentOf.get(id)
    // The outermost match names the phase: a frame's own rule counts only where no caller's did.
    const above = parent === undefined ? OTHER : phaseOf(parent)
    const phase = above !== OTHER ? above : (own ?? OTHER)
    phaseOfNode.set(id, phase)
    return phase
  }
  const out = new Map<string, { all: number; writes: number }>()
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i]!
    const { functionName } = byId.get(id)!.callFrame
    if (functionName === '(idle)') continue
    const micros = (profile.timeDeltas[i] ?? 0) / requests
    const phase = phaseOf(id)
    const entry = out.get(phase) ?? { all: 0, writes: 0 }
    entry.all += micros
    if (WRITES.has(functionName)) entry.writes += micros
    out.set(phase, entry)
  }
  return out
}

const sides = process.argv.slice(2).map((argument) => {
  const at = argument.lastIndexOf('=')
  const requests = Number(argument.slice(at + 1))
  if (at === -1 || !(requests > 0)) {
    console.error('usage: tsx bench/profile-phases.ts <file.cpuprofile>=<requests> [<file>=<requests> …]')
    process.exit(2)
  }
  const file = argument.slice(0, at)
  return { file, requests, phases: phasesOf(file, requests) }
})
if (sides.length === 0) {
  console.error('usage: tsx bench/profile-phases.ts <file.cpuprofile>=<requests> [<file>=<requests> …]')
  process.exit(2)
}

const names = [...PHASES.map((phase) => phase.name), OTHER]
const cell = (value: number) => value.toFixed(2).padStart(8)
console.log("µs a request under the profiler; in brackets, the socket writes' system calls; Δ: against the first\n")
for (const [i, side] of sides.entries()) console.log(`[${i + 1}] ${side.file}`)
console.log(
  `\n${'phase'.padEnd(40)}${sides.map((_, i) => `${`[${i + 1}]`.padStart(8)}${'writes'.padStart(9)}${i === 0 ? '' : 'Δ'.padStart(8)}`).join('')}`,
)
const totals = sides.map(() => ({ all: 0, writes: 0 }))
for (const name of names) {
  let line = name.padEnd(40)
  sides.forEach((side, i) => {
    const entry = side.phases.get(name) ?? { all: 0, writes: 0 }
    totals[i]!.all += entry.all
    totals[i]!.writes += entry.writes
    const first = sides[0]!.phases.get(name)?.all ?? 0
    line += `${cell(entry.all)} (${cell(entry.writes).trim().padStart(6)})${i === 0 ? '' : cell(entry.all - first)}`
  })
  console.log(line)
}
let line = 'all'.padEnd(40)
totals.forEach((total, i) => {
  line += `${cell(total.all)} (${cell(total.writes).trim().padStart(6)})${i === 0 ? '' : cell(total.all - totals[0]!.all)}`
})
console.log(line)
// PHASES_OTHER=<depth>: the last profile's stacks in no phase, by their outer <depth> frames.
const otherDepth = Number(process.env.PHASES_OTHER ?? 0)
if (otherDepth > 0) {
  const last = sides.at(-1)!
  const profile = JSON.parse(readFileSync(last.file, 'utf8')) as Profile
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const parentOf = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id)
  const inPhase = (node: ProfileNode) =>
    PHASES.some((phase) => phase.matches(node.callFrame.functionName, node.callFrame.url))
  const stacks = new Map<string, number>()
  for (let i = 0; i < profile.samples.length; i++) {
    const chain: ProfileNode[] = []
    for (let id: number | undefined = profile.samples[i]!; id !== undefined; id = parentOf.get(id))
      chain.unshift(byId.get(id)!)
    if (chain.some(inPhase) || chain.at(-1)!.callFrame.functionName === '(idle)') continue
    const frames = chain
      .slice(1, otherDepth + 1)
      .map((node) => `${node.callFrame.functionName || '(anonymous)'} ${node.callFrame.url.split('/').pop()}`)
    const key = frames.join(' > ')
    stacks.set(key, (stacks.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0) / last.requests)
  }
  console.log(`\n[${sides.length}]'s time in no phase, by its stacks' outer ${otherDepth} frames (µs a request):`)
  for (const [key, micros] of [...stacks].sort((a, b) => b[1] - a[1]).slice(0, 30))
    console.log(`${cell(micros)}  ${key}`)
}
