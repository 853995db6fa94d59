// The operator CLI's process entry (`npm run cli -- <command>`, `node dist/cli.js <command>` in
// the image): the commands themselves are cli/run.ts's runCli, which tests call in process.
import { runCli } from './cli/run.js'

process.exitCode = await runCli(process.argv.slice(2), process.env, {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
})
