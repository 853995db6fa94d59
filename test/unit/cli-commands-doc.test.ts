// The CLI's commands as the docs list them: every command the CLI runs is named in the README's
// list and in docs/configuration.md's table of commands, so that neither drifts from the other.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { CLI_COMMANDS } from '../../src/cli/run.js'

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8')

t.test('every command is in the README and in docs/configuration.md', async (t) => {
  const readme = read('README.md')
  const configuration = read('docs/configuration.md')
  t.ok(CLI_COMMANDS.length >= 11, `${CLI_COMMANDS.length} commands`)
  for (const command of CLI_COMMANDS) {
    t.ok(readme.includes(`\`${command}\``), `README names \`${command}\``)
    t.ok(configuration.includes(`| \`${command}`), `docs/configuration.md has a row for \`${command}\``)
  }
})
