// The operator CLI in tests. Commands run in this process through `runCli` (src/cli/run.ts), with
// the environment a test gives them (and the tests' ENCRYPTION_KEY unless it names another): what
// they print, their exit code and what they store are the same as from the process entry, without
// 3-4 s of starting npm and tsx per command. `runCliProcess` runs the entry itself, as an operator
// does (`npm run --silent cli -- ...` from the repository root), for the few tests of the entry.
// Success is one JSON object on stdout and nothing on stderr; failure is a non-zero exit, one line
// on stderr and nothing on stdout (docs/configuration.md).
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { runCli } from '../../src/cli/run.js'
import { TEST_ENCRYPTION_KEY } from './encryption-key.js'
import type { JsonBody } from './json.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))

export interface CliResult {
  code: number | null
  stdout: string
  stderr: string
}

type Env = Record<string, string | undefined>

/** One command line run in this process, reading exactly the variables in `env`. */
export async function runCliHere(args: string[], env: Env): Promise<CliResult> {
  let stdout = ''
  let stderr = ''
  const code = await runCli(args, env, {
    stdout: (text) => {
      stdout += text
    },
    stderr: (text) => {
      stderr += text
    },
  })
  return { code, stdout, stderr }
}

/** One command line through the entry, `npm run --silent cli -- ...`, in a process of its own. */
export function runCliProcess(args: string[], env: Env): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      'npm',
      ['run', '--silent', 'cli', '--', ...args],
      { cwd: REPO_ROOT, env, timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : null
        resolve({ code, stdout, stderr })
      },
    )
  })
}

export interface Cli {
  run(args: string[]): Promise<CliResult>
  /** Runs a command that must succeed and returns the one JSON object it printed. */
  ok(t: Test, args: string[]): Promise<JsonBody>
  /** Runs a command that must fail, and returns its one line on stderr. */
  fails(t: Test, args: string[], message?: RegExp): Promise<string>
}

/** The operator's shell: this process's variables, the tests' ENCRYPTION_KEY, then `env`. */
export function cli(env: Record<string, string>): Cli {
  const run = (args: string[]) => runCliHere(args, { ...process.env, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, ...env })
  return {
    run,
    async ok(t, args) {
      const result = await run(args)
      t.equal(result.code, 0, `exit 0: ${args.join(' ')} (stderr: ${result.stderr.trim()})`)
      t.equal(result.stderr, '', 'nothing on stderr')
      const lines = result.stdout.split('\n')
      t.equal(lines.length, 2, 'exactly one line on stdout')
      t.equal(lines[1], '', 'ending in a newline')
      const value = JSON.parse(lines[0]!)
      t.ok(typeof value === 'object' && value !== null, 'a JSON object')
      t.notOk(Array.isArray(value), 'not an array')
      return value
    },
    async fails(t, args, message) {
      const result = await run(args)
      t.ok(result.code !== null && result.code !== 0, `non-zero exit: ${args.join(' ')} (got ${result.code})`)
      t.equal(result.stdout, '', 'nothing on stdout')
      const lines = result.stderr.split('\n')
      t.equal(lines.length, 2, `exactly one line on stderr: ${JSON.stringify(result.stderr)}`)
      t.equal(lines[1], '', 'ending in a newline')
      t.not(lines[0], '', 'a non-empty message')
      if (message) t.match(lines[0], message)
      return lines[0]!
    },
  }
}
