// The gateway's log stream (src/ops/logging.ts) when stdout is gone for good before a failed
// write was reported: the exit's flush lets go of it, where sonic-boom 4 retried for ever.
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { orTimeout } from '../helpers/poll.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const FIXTURE = fileURLToPath(new URL('../fixtures/log-to-closed-stdout.ts', import.meta.url))

t.test('lines queued for a closed stdout, then an exit: the process exits 0', async (t) => {
  const child = spawn(process.execPath, [...RUN_TYPESCRIPT, FIXTURE], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => child.kill('SIGKILL'))
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  t.equal(await orTimeout(exit, 30_000, 'still running after 30 s'), 0, `exit 0 ${stderr.slice(-400)}`)
})
