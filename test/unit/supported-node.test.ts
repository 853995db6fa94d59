// scripts/supported-node.mjs, which `npm start`, `npm run cli` and the test scripts preload: on a
// Node older than package.json's engines they run again on the image's Node, or stop with one line
// saying how to get a supported one; on a supported Node they run as they are.
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { compareVersions, decide, enginesFloor } from '../../scripts/supported-node.mjs'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

t.test('versions compare part by part, with or without their v', async (t) => {
  t.ok(compareVersions('v20.20.2', '22.12.0') < 0)
  t.ok(compareVersions('22.9.0', '22.12.0') < 0, 'not as text')
  t.equal(compareVersions('v22.12.0', '22.12.0'), 0)
  t.ok(compareVersions('26.10.0', '22.12.0') > 0)
})

t.test("the floor is package.json's engines", async (t) => {
  t.equal(enginesFloor(), '22.12.0')
})

t.test('a supported Node runs the command as it is', async (t) => {
  const noFetch = () => {
    throw new Error('no Node is fetched')
  }
  t.same(decide('v22.12.0', '22.12.0', noFetch), { run: null })
  t.same(decide('v26.10.0', '22.12.0', noFetch), { run: null })
})

t.test("an older Node runs it again on the image's, saying so in one line", async (t) => {
  const decision = decide(
    'v20.20.2',
    '22.12.0',
    () => '/cache/node-26/bin',
    () => 'v26.10.0',
  )
  t.match(decision, { run: '/cache/node-26/bin' })
  const say = (decision as { say: string }).say
  t.match(say, /^node v20\.20\.2 is older than package\.json's engines \(>=22\.12\.0\): running on node v26\.10\.0/)
  t.notMatch(say, /\n/, 'one line')
})

t.test('an older Node and none to be had: one line saying how to get one', async (t) => {
  const offline = decide('v20.20.2', '22.12.0', () => {
    throw new Error("the image's node could not be had: npm ERR! network\nmore")
  })
  t.match(offline, {
    stop: /^node v20\.20\.2 is older .*could not be fetched \(.*network\): install Node 22\.12\.0 or later/,
  })
  t.notMatch((offline as { stop: string }).stop, /\n|more/, 'one line, the reason its first')
  const tooOld = decide(
    'v20.20.2',
    '22.12.0',
    () => '/cache/node-20/bin',
    () => 'v20.19.0',
  )
  t.match(tooOld, { stop: /is older too: install Node 22\.12\.0 or later/ }, 'never a loop of older Nodes')
})

const supported = compareVersions(process.version, enginesFloor()) >= 0
t.test('preloaded on a supported Node: nothing said, the command runs here', { skip: !supported }, async (t) => {
  const ran = spawnSync(
    process.execPath,
    ['--import', './scripts/supported-node.mjs', '-e', 'console.log(process.execPath)'],
    { cwd: ROOT, encoding: 'utf8' },
  )
  t.equal(ran.status, 0)
  t.equal(ran.stderr, '')
  t.equal(ran.stdout.trim(), process.execPath)
})
