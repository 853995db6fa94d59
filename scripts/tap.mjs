// tap's runner, as the test scripts run it (`npm test`, `npm run test:unit`, …): first, tap's plugin
// set is built as package.json's `tap.plugin` asks when it is not yet (a fresh `npm ci` installs tap
// built with its default set, whose TypeScript plugin cannot load this project's TypeScript 7, and
// tap's runner rebuilds only after it has started the run's files with the old set); then the
// runner, with this script's arguments. Run under scripts/supported-node.mjs, on a supported Node.
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
// tap's own packages, installed with it: its runner's configuration, and the Test class as built.
import { TapConfig } from '@tapjs/config'
import { signature } from '@tapjs/test/test-built'
import { foregroundChild } from 'foreground-child'

const tapPackage = new URL(import.meta.resolve('tap/package.json'))
const TAP = fileURLToPath(new URL(JSON.parse(readFileSync(tapPackage, 'utf8')).bin.tap, tapPackage))

const config = await TapConfig.load()
if (signature !== config.pluginSignature) {
  const built = spawnSync(process.execPath, [TAP, 'build'], { stdio: ['ignore', 'ignore', 'inherit'] })
  if (built.status !== 0) {
    console.error(`tap build failed (exit ${built.status ?? built.signal}): run \`npx tap build\` to see why`)
    process.exit(1)
  }
}
foregroundChild(process.execPath, [TAP, ...process.argv.slice(2)])
