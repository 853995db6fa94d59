// Replays the Dockerfile (see the header of .ci/docker-check). It supports the subset this
// project's Dockerfile uses and stops on anything else, so that a Dockerfile change the replay
// cannot mirror turns CI red instead of passing unchecked.
import { execFile, execFileSync, spawn } from 'node:child_process'
import { cpSync, createWriteStream, existsSync, mkdirSync, readFileSync, statSync } from 'node:fs'
import { createServer } from 'node:net'
import { basename, dirname, join, posix, relative } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

const context = process.env.CONTEXT
const work = process.env.WORK
const HEALTH_PATH = '/healthz'
const START_TIMEOUT_MS = 30_000
const STOP_TIMEOUT_MS = 15_000 // the stop rules (src/signals.ts) give the gateway 10 s

const started = Date.now()
const say = (msg) => console.log(`docker-check: [${((Date.now() - started) / 1000).toFixed(1).padStart(4)} s] ${msg}`)
class CheckError extends Error {}
const fail = (msg) => {
  throw new CheckError(msg)
}

// Every process started here ends with this one, whichever way it ends.
const children = new Set()
const killChildren = () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
}
process.on('exit', killChildren)
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => process.exit(1))
}

/** Runs a command, its output into a log file that is printed if it fails. */
function run(command, args, { cwd, env, logName, timeout }) {
  const log = join(work, logName)
  const out = createWriteStream(log)
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, timeout, stdio: ['ignore', 'pipe', 'pipe'] })
    children.add(child)
    child.stdout.pipe(out, { end: false })
    child.stderr.pipe(out, { end: false })
    child.on('error', reject)
    child.on('close', (code, signal) => {
      out.end(() => {
        if (code === 0) return resolve()
        process.stderr.write(readFileSync(log, 'utf8'))
        reject(new CheckError(`\`${[command, ...args].join(' ')}\` exited with ${code ?? signal}`))
      })
    })
  })
}

// ---- Dockerfile → instructions ------------------------------------------------------------------
function parseDockerfile(text) {
  const logical = []
  let current = null
  text.split('\n').forEach((raw, index) => {
    const line = raw.replace(/\r$/, '')
    if (/^\s*#/.test(line)) return // comments (and parser directives), also inside continuations
    if (current === null) {
      if (line.trim() === '') return
      current = { line: index + 1, text: '' }
    }
    const continued = /\\\s*$/.test(line)
    current.text += `${continued ? line.replace(/\\\s*$/, '') : line} `
    if (!continued) {
      logical.push(current)
      current = null
    }
  })
  if (current !== null) logical.push(current)
  return logical.map(({ line, text }) => {
    const match = /^\s*(\S+)\s*(.*?)\s*$/.exec(text)
    const keyword = match[1].toUpperCase()
    let args = match[2].replace(/\s+/g, ' ')
    if (args.includes('<<')) fail(`line ${line}: heredocs are not supported by the replay`)
    const flags = {}
    const FLAG = /^--([a-z-]+)(?:=(\S*))? ?/
    for (let flag = FLAG.exec(args); flag !== null; flag = FLAG.exec(args)) {
      if (flags[flag[1]] !== undefined) fail(`line ${line}: ${keyword} --${flag[1]} is given twice`)
      flags[flag[1]] = flag[2] ?? true
      args = args.slice(flag[0].length)
    }
    return { line, keyword, flags, args }
  })
}

function substitute(value, vars, line) {
  return value.replace(/\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))|\$\{[^}]*\}/g, (whole, braced, plain) => {
    const name = braced ?? plain
    if (name === undefined) fail(`line ${line}: ${whole} is not supported by the replay`)
    if (vars[name] === undefined) fail(`line ${line}: $${name} is not defined`)
    return vars[name]
  })
}

function words(args, line) {
  if (args.startsWith('[')) return jsonArray(args, line)
  if (/["']/.test(args)) fail(`line ${line}: quoted words are not supported by the replay: ${args}`)
  return args.split(' ').filter(Boolean)
}

function jsonArray(args, line) {
  let value
  try {
    value = JSON.parse(args)
  } catch {
    fail(`line ${line}: expected the exec form (a JSON array), got: ${args}`)
  }
  if (!Array.isArray(value) || value.length === 0 || !value.every((v) => typeof v === 'string')) {
    fail(`line ${line}: expected a non-empty JSON array of strings, got: ${args}`)
  }
  return value
}

function envPairs(args, vars, line) {
  const pairs = {}
  let rest = args
  while (rest !== '') {
    const m = /^([A-Za-z_]\w*)=("(?:[^"\\]|\\.)*"|[^\s"']*) ?/.exec(rest)
    if (m === null) fail(`line ${line}: ENV must be KEY=value pairs, got: ${rest}`)
    const value = m[2].startsWith('"') ? m[2].slice(1, -1).replace(/\\(.)/g, '$1') : m[2]
    pairs[m[1]] = substitute(value, { ...vars, ...pairs }, line)
    rest = rest.slice(m[0].length)
  }
  return pairs
}

function parseDuration(value, line) {
  const m = /^(\d+)(ms|s|m)$/.exec(String(value))
  if (m === null) fail(`line ${line}: cannot read the duration ${value}`)
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2]]
}

// ---- .dockerignore, as moby/patternmatcher reads it: the last pattern that matches the path or
// one of its parent directories decides ----------------------------------------------------------
function loadDockerignore() {
  const file = join(context, '.dockerignore')
  if (!existsSync(file)) return []
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const exclusion = l.startsWith('!')
      const pattern = posix.normalize((exclusion ? l.slice(1) : l).trim()).replace(/^\/+|\/+$/g, '')
      if (/[[\]\\]/.test(pattern))
        fail(`.dockerignore: character classes and escapes are not supported by the replay: ${l}`)
      let source = ''
      for (let i = 0; i < pattern.length; i++) {
        const c = pattern[i]
        if (c === '*' && pattern[i + 1] === '*') {
          i++
          if (pattern[i + 1] === '/') {
            i++
            source += '(?:.*/)?'
          } else source += '.*'
        } else if (c === '*') source += '[^/]*'
        else if (c === '?') source += '[^/]'
        else source += c.replace(/[.+^${}()|]/g, '\\$&')
      }
      return { exclusion, regex: new RegExp(`^${source}$`) }
    })
}
const ignorePatterns = loadDockerignore()
function ignored(relPath) {
  const parts = relPath.split('/')
  const paths = parts.map((_, i) => parts.slice(0, i + 1).join('/'))
  let excluded = false
  for (const { exclusion, regex } of ignorePatterns) {
    if (paths.some((p) => regex.test(p))) excluded = !exclusion
  }
  return excluded
}

// ---- stages -------------------------------------------------------------------------------------
function splitStages(instructions) {
  const globalArgs = {}
  const groups = []
  for (const instruction of instructions) {
    const { line, keyword, args } = instruction
    if (keyword === 'FROM') groups.push({ from: instruction, body: [] })
    else if (groups.length > 0) groups.at(-1).body.push(instruction)
    else if (keyword !== 'ARG') fail(`line ${line}: only ARG may come before the first FROM`)
    else {
      for (const word of words(args, line)) {
        const [name, ...value] = word.split('=')
        globalArgs[name] = value.length > 0 ? value.join('=') : undefined
      }
    }
  }
  if (groups.length === 0) fail('the Dockerfile has no FROM')
  const specs = []
  for (const [index, { from, body }] of groups.entries()) {
    if (Object.keys(from.flags).length > 0) fail(`line ${from.line}: FROM flags are not supported by the replay`)
    const m = /^(\S+)(?: AS (\S+))?$/i.exec(substitute(from.args, globalArgs, from.line))
    if (m === null) fail(`line ${from.line}: cannot read FROM ${from.args}`)
    const parent = specs.find((s) => s.name === m[1])
    specs.push({
      index,
      name: m[2] ?? String(index),
      base: m[1],
      image: parent?.image ?? m[1],
      parent,
      body,
      final: index === groups.length - 1,
    })
  }
  return specs
}

async function replayStage(spec, specs, replayed) {
  const say_ = (msg) => say(`[${spec.name}] ${msg}`)
  const root = join(work, 'stages', `${spec.index}-${spec.name}`)
  mkdirSync(root, { recursive: true })
  let stage = {
    root,
    image: spec.image,
    workdir: '/',
    env: {},
    user: undefined,
    expose: [],
    cmd: undefined,
    healthcheck: undefined,
  }
  if (spec.parent !== undefined) {
    const parent = await replayed.get(spec.parent.name)
    await run('cp', ['-a', `${parent.root}/.`, root], { logName: `cp-${spec.name}.log` })
    stage = { ...parent, root, env: { ...parent.env }, expose: [...parent.expose] }
  }
  say_(`FROM ${spec.base}`)
  const inStage = (p) => join(root, p)
  const absolute = (p) => (p.startsWith('/') ? posix.normalize(p) : posix.join(stage.workdir, p))

  for (const instruction of spec.body) {
    const { line, keyword, flags, args } = instruction
    switch (keyword) {
      case 'WORKDIR':
        stage.workdir = absolute(substitute(args, stage.env, line))
        mkdirSync(inStage(stage.workdir), { recursive: true })
        break
      case 'ENV':
        Object.assign(stage.env, envPairs(args, stage.env, line))
        break
      case 'COPY': {
        for (const flag of Object.keys(flags)) {
          if (!['from', 'chown', 'chmod', 'link'].includes(flag))
            fail(`line ${line}: COPY --${flag} is not supported by the replay`)
        }
        const sources = words(substitute(args, stage.env, line), line)
        if (sources.length < 2) fail(`line ${line}: COPY needs a source and a destination`)
        const dest = sources.pop()
        const destPath = inStage(absolute(dest))
        const intoDir = dest.endsWith('/') || sources.length > 1
        let fromRoot = null
        if (flags.from !== undefined) {
          const from = specs.find((s) => s.name === flags.from && s.index < spec.index)
          if (from === undefined)
            fail(`line ${line}: COPY --from=${flags.from}: only earlier stages are supported by the replay`)
          fromRoot = (await replayed.get(from.name)).root
        }
        for (const src of sources) {
          if (/[*?[]/.test(src)) fail(`line ${line}: wildcards in COPY are not supported by the replay: ${src}`)
          let srcPath
          if (fromRoot !== null) srcPath = join(fromRoot, posix.normalize(`/${src}`))
          else {
            const rel = posix.normalize(src).replace(/^\/+|\/+$/g, '')
            if (rel.startsWith('..')) fail(`line ${line}: COPY ${src}: outside the build context`)
            if (rel !== '.' && ignored(rel)) fail(`line ${line}: COPY ${src}: excluded by .dockerignore`)
            srcPath = join(context, rel)
          }
          if (!existsSync(srcPath))
            fail(`line ${line}: COPY ${src}: not found ${fromRoot ? `in stage ${flags.from}` : 'in the build context'}`)
          if (statSync(srcPath).isDirectory()) {
            // A directory's contents go into the destination, less what .dockerignore excludes.
            mkdirSync(destPath, { recursive: true })
            // From a stage: hard links (-l), as the replay never writes into a stage it copied from.
            if (fromRoot !== null)
              await run('cp', ['-al', `${srcPath}/.`, destPath], { logName: `cp-line-${line}.log` })
            else
              cpSync(srcPath, destPath, {
                recursive: true,
                filter: (p) => p === srcPath || !ignored(relative(context, p)),
                verbatimSymlinks: true,
              })
          } else {
            const isDir = existsSync(destPath) && statSync(destPath).isDirectory()
            const target = intoDir || isDir ? join(destPath, basename(src)) : destPath
            mkdirSync(dirname(target), { recursive: true })
            cpSync(srcPath, target)
          }
        }
        say_(`COPY ${flags.from ? `--from=${flags.from} ` : ''}${sources.join(' ')} → ${absolute(dest)}`)
        break
      }
      case 'RUN': {
        for (const [flag, value] of Object.entries(flags)) {
          // A cache mount only speeds up the image build; here npm has this machine's cache.
          if (flag !== 'mount' || !/^type=cache(,|$)/.test(value))
            fail(`line ${line}: RUN --${flag}=${value} is not supported by the replay`)
        }
        if (args.startsWith('[')) fail(`line ${line}: exec-form RUN is not supported by the replay`)
        if (spec.final) {
          // Users, groups and directories of the image: nothing to mirror here. An install would
          // matter, and could not be mirrored: it belongs in an earlier stage.
          if (/\b(npm|npx|node|yarn|pnpm|corepack)\b/.test(args))
            fail(`line ${line}: the runtime stage runs \`${args}\`; install in an earlier stage and COPY the result`)
          say_(`RUN (runtime stage, not replayed) ${args}`)
          break
        }
        say_(`RUN ${args}`)
        await run('/bin/sh', ['-c', args], {
          cwd: inStage(stage.workdir),
          env: { ...process.env, ...stage.env },
          logName: `run-line-${line}.log`,
        })
        say_(`RUN done (line ${line})`)
        break
      }
      case 'USER':
        stage.user = substitute(args, stage.env, line)
        break
      case 'EXPOSE':
        stage.expose.push(...words(args, line).map((p) => p.replace(/\/tcp$/, '')))
        break
      case 'HEALTHCHECK':
        if (args === 'NONE') stage.healthcheck = undefined
        else {
          const m = /^CMD (.*)$/.exec(args)
          if (m === null) fail(`line ${line}: HEALTHCHECK must be CMD [...] or NONE`)
          stage.healthcheck = { cmd: jsonArray(m[1], line), timeoutMs: parseDuration(flags.timeout ?? '30s', line) }
        }
        break
      case 'CMD':
        // Exec form only: the shell form puts /bin/sh in front of node, and sh does not pass
        // SIGTERM on.
        stage.cmd = jsonArray(args, line)
        break
      case 'LABEL':
      case 'STOPSIGNAL':
        break
      default:
        fail(`line ${line}: ${keyword} is not supported by the replay; extend .ci/docker-check`)
    }
  }
  return stage
}

// ---- what the image promises ----------------------------------------------------------------------
function nodeVersionOf(image) {
  const tag = /^(?:docker\.io\/)?(?:library\/)?node:(\d+\.\d+\.\d+)-[a-z0-9.-]*slim(?:@sha256:[0-9a-f]{64})?$/.exec(
    image,
  )
  if (tag === null) fail(`the runtime image ${image} is not pinned to a node:<major>.<minor>.<patch>-…-slim tag`)
  return tag[1]
}

function checkRuntimeStage(runtime) {
  const user = /^(\d+)(?::(\d+))?$/.exec(runtime.user ?? '')
  if (user === null || user[1] === '0' || user[2] === '0') {
    fail(
      `the runtime stage's USER is ${runtime.user ?? 'unset (root)'}; it must be a numeric non-root uid:gid, for runAsNonRoot`,
    )
  }
  if (runtime.cmd?.[0] !== 'node')
    fail(`the runtime CMD must start node itself (PID 1 receives SIGTERM), got ${JSON.stringify(runtime.cmd)}`)
  if (runtime.healthcheck === undefined) fail('the runtime stage has no HEALTHCHECK')
  for (const name of ['PORT', 'METRICS_PORT']) {
    if (runtime.env[name] === undefined) fail(`the runtime stage sets no ${name}`)
    if (!runtime.expose.includes(runtime.env[name])) fail(`${name}=${runtime.env[name]} is not EXPOSEd`)
  }
  say(
    `runtime stage: ${runtime.image}, USER ${runtime.user}, WORKDIR ${runtime.workdir}, CMD ${JSON.stringify(runtime.cmd)}`,
  )
}

// --ignore-scripts is only right while no production dependency has an install script.
function checkInstallScripts() {
  const lock = JSON.parse(readFileSync(join(context, 'package-lock.json'), 'utf8'))
  const scripted = Object.entries(lock.packages ?? {})
    .filter(([path, p]) => path !== '' && p.hasInstallScript && !p.dev)
    .map(([path]) => path.replace(/^.*node_modules\//, ''))
  if (scripted.length > 0)
    fail(
      `production dependencies with install scripts, which the Dockerfile's --ignore-scripts skips: ${scripted.join(', ')}`,
    )
}

// ---- Node of the image's release line -------------------------------------------------------------
// The image cannot be pulled here, but the npm registry's node-linux-<arch> packages hold Node's
// release binaries: the smoke start runs on the image's Node (or, until that release is published
// there, the nearest of its line before it) rather than on this machine's Node. The one fetcher of
// it is scripts/image-node.ts (the benches' and the tests' too), under the repository's tsx.
async function installNode(version) {
  const repository = join(dirname(fileURLToPath(import.meta.url)), '..')
  let bin
  try {
    bin = await new Promise((resolve, reject) =>
      execFile(
        process.execPath,
        ['--import', 'tsx', 'scripts/image-node.ts', version],
        { cwd: repository, encoding: 'utf8' },
        (err, stdout, stderr) => (err ? reject(new Error(stderr.trim() || err.message)) : resolve(stdout.trim())),
      ),
    )
  } catch (err) {
    fail(`Node ${version} for the smoke start: ${err.message.split('\n').at(-1)}`)
  }
  const node = join(bin, 'node')
  const reported = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim()
  say(
    `Node ${reported} for the smoke start${reported === `v${version}` ? '' : `: the nearest of ${version}'s line that could be had`}`,
  )
  return node
}

// ---- the smoke start ------------------------------------------------------------------------------
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(String(port)))
    })
  })
}

async function get(url, headers = {}) {
  try {
    const res = await fetch(url, { headers, signal: AbortSignal.timeout(2000) })
    return { status: res.status, body: await res.text() }
  } catch (err) {
    return { status: 0, body: String(err.cause?.code ?? err.message) }
  }
}

async function smokeStart(runtime, node) {
  // The image's ENV and nothing else of this machine's (no DATABASE_URL, REDIS_URL, …); absolute
  // paths (DATA_DIR) point into the replayed filesystem; the ports are free ones.
  const env = {}
  for (const [name, value] of Object.entries(runtime.env))
    env[name] = value.startsWith('/') ? join(runtime.root, value) : value
  env.PORT = await freePort()
  do env.METRICS_PORT = await freePort()
  while (env.METRICS_PORT === env.PORT)
  env.PATH = `${dirname(node)}:/usr/local/bin:/usr/bin:/bin`
  const cwd = join(runtime.root, runtime.workdir)
  const withNode = (argv) => (argv[0] === 'node' ? [node, ...argv.slice(1)] : argv)

  const shown = Object.entries(env)
    .filter(([k]) => k !== 'PATH')
    .map(([k, v]) => `${k}=${v}`)
  say(`starting ${JSON.stringify(runtime.cmd)} in ${runtime.workdir} with ${shown.join(' ')}`)
  const logPath = join(work, 'gateway.log')
  const log = createWriteStream(logPath)
  let stdout = ''
  const [command, ...args] = withNode(runtime.cmd)
  const app = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
  children.add(app)
  app.stdout.on('data', (chunk) => {
    stdout += chunk
    log.write(chunk)
  })
  app.stderr.on('data', (chunk) => log.write(chunk))
  const exited = new Promise((resolve) => app.on('exit', (code, signal) => resolve({ code, signal })))
  const running = () => app.exitCode === null && app.signalCode === null

  try {
    const base = `http://127.0.0.1:${env.PORT}`
    let health = { status: 0, body: '' }
    const deadline = Date.now() + START_TIMEOUT_MS
    while (health.status !== 200) {
      if (!running()) fail(`the gateway exited during its start (status ${app.exitCode ?? app.signalCode})`)
      if (Date.now() > deadline)
        fail(
          `GET ${HEALTH_PATH} did not answer 200 within ${START_TIMEOUT_MS / 1000} s (last answer: ${health.status || health.body})`,
        )
      await sleep(250)
      health = await get(`${base}${HEALTH_PATH}`)
    }
    say(`GET ${HEALTH_PATH} → ${health.status}`)

    const [hcCommand, ...hcArgs] = withNode(runtime.healthcheck.cmd)
    await run(hcCommand, hcArgs, { cwd, env, logName: 'healthcheck.log', timeout: runtime.healthcheck.timeoutMs })
    say('HEALTHCHECK command → exit 0')

    const metrics = await get(`http://127.0.0.1:${env.METRICS_PORT}/metrics`)
    if (metrics.status !== 200 || !metrics.body.includes('# HELP'))
      fail(`GET :${env.METRICS_PORT}/metrics → ${metrics.status || metrics.body}`)
    say(
      `GET :METRICS_PORT/metrics → 200, ${metrics.body.split('\n').filter((l) => l.startsWith('# HELP')).length} metrics`,
    )

    // docs/configuration.md: the embedded database's first start prints a parent key, once. Listing
    // sub-accounts with it goes through the migrated tables and the store's production dependencies.
    // It is printed once both ports are bound, so it may follow the first /healthz answer: wait for it.
    const bootstrapLine = /^bootstrap parent account \S+ key (\S+)$/m
    const keyDeadline = Date.now() + 10_000
    while (!bootstrapLine.test(stdout) && running() && Date.now() < keyDeadline) await sleep(100)
    const key = bootstrapLine.exec(stdout)?.[1]
    if (key === undefined) fail('the first start printed no `bootstrap parent account … key …` line')
    const list = await get(`${base}/v1/sub-accounts`, { authorization: `Bearer ${key}` })
    if (list.status !== 200)
      fail(`GET /v1/sub-accounts with the bootstrap key → ${list.status || ''} ${list.body.slice(0, 300)}`)
    say('GET /v1/sub-accounts with the bootstrap key → 200')

    // docs/console.md: the image serves the console that `npm run build` bundled (it has no
    // esbuild to bundle one): the page, then each asset it links.
    const page = await get(`${base}/console`)
    const assets = [...page.body.matchAll(/"(\/console\/assets\/[^"]+)"/g)].map((m) => m[1])
    if (page.status !== 200 || assets.length !== 2)
      fail(`GET /console → ${page.status || ''} with ${assets.length} assets: ${page.body.slice(0, 300)}`)
    for (const path of assets) {
      const asset = await get(`${base}${path}`)
      if (asset.status !== 200) fail(`GET ${path} → ${asset.status || ''} ${asset.body.slice(0, 300)}`)
    }
    say(`GET /console → 200, and its ${assets.length} assets → 200`)

    app.kill('SIGTERM')
    const stopped = await Promise.race([exited, sleep(STOP_TIMEOUT_MS, null, { ref: false })])
    if (stopped === null) fail(`the gateway was still running ${STOP_TIMEOUT_MS / 1000} s after SIGTERM`)
    if (stopped.code !== 0) fail(`after SIGTERM the gateway exited with ${stopped.code ?? stopped.signal}, not 0`)
    say('SIGTERM → exit 0')
  } catch (err) {
    if (running()) app.kill('SIGKILL')
    await exited
    await new Promise((resolve) => log.end(resolve))
    process.stderr.write(`---- gateway output ----\n${readFileSync(logPath, 'utf8')}------------------------\n`)
    throw err
  }
}

try {
  const specs = splitStages(parseDockerfile(readFileSync(join(context, 'Dockerfile'), 'utf8')))
  const runtimeSpec = specs.at(-1)
  const nodeVersion = nodeVersionOf(runtimeSpec.image)
  checkInstallScripts()
  // Stages run as soon as what they need is there, as BuildKit runs them; Node downloads meanwhile.
  const replayed = new Map()
  for (const spec of specs) replayed.set(spec.name, replayStage(spec, specs, replayed))
  const [node, ...stages] = await Promise.all([installNode(nodeVersion), ...replayed.values()])
  const runtime = stages.at(-1)
  checkRuntimeStage(runtime)
  await smokeStart(runtime, node)
} catch (err) {
  if (!(err instanceof CheckError)) throw err
  console.error(`docker-check: FAIL: ${err.message}`)
  process.exit(1)
}
