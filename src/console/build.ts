// `npm run build` bundles the console and the sub-account portal into dist/console/assets, so that
// the image serves them without esbuild (docs/console.md). Run with tsx: tsx src/console/build.ts [outdir].
import { mkdir, writeFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { type BundleName, bundleConsole, filesOf } from './assets.js'

const outdir = resolve(process.argv[2] ?? 'dist/console/assets')
await mkdir(outdir, { recursive: true })
for (const name of ['console', 'portal'] as const satisfies readonly BundleName[]) {
  const { script, style } = await bundleConsole(name)
  const files = filesOf(name)
  await writeFile(join(outdir, files.script), script)
  await writeFile(join(outdir, files.style), style)
  process.stdout.write(`${name}: ${script.byteLength} bytes of script, ${style.byteLength} of CSS in ${outdir}\n`)
}
