// `npm run build` bundles the console into dist/console/assets, so that the image serves it
// without esbuild (docs/console.md). Run with tsx: tsx src/console/build.ts [outdir].
import { mkdir, writeFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { bundleConsole, SCRIPT_FILE, STYLE_FILE } from './assets.js'

const outdir = resolve(process.argv[2] ?? 'dist/console/assets')
const { script, style } = await bundleConsole()
await mkdir(outdir, { recursive: true })
await writeFile(join(outdir, SCRIPT_FILE), script)
await writeFile(join(outdir, STYLE_FILE), style)
process.stdout.write(`console: ${script.byteLength} bytes of script, ${style.byteLength} of CSS in ${outdir}\n`)
