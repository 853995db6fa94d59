// The process entry: the gateway started on the process's environment, its stdout, stderr, exit
// and signals (start.ts). Nothing else: tests start the gateway in process with `startGateway`.
import { stdoutDestination } from './ops/logging.js'
import { startGateway } from './start.js'

await startGateway(process.env, {
  // The log's stdout, which the embedded bootstrap's key line goes out through too (bootstrap.ts).
  stdout: stdoutDestination(),
  stderr: (text) => process.stderr.write(text),
  exit: (code) => process.exit(code),
  on: (event, listener) => process.on(event, listener),
})
