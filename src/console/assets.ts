// The console's script and stylesheet (docs/console.md), and the sub-account portal's (docs/portal.md:
// a second entry point on the same components and CSS): read from dist/console/assets when the
// image's build made them (npm run build), else bundled from ./ui with esbuild on first use, once
// per process. Each is named by a hash of its bytes, so it can be cached for good, and kept gzipped.
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { gzipSync } from 'node:zlib'

export interface Asset {
  /** `console.<hash>.js`: the name the page links to. */
  name: string
  type: string
  body: Buffer
  gzip: Buffer
  etag: string
}

export interface ConsoleAssets {
  script: Asset
  style: Asset
}

/** What the bundler and the build write: plain bytes, before hashing and compression. */
export interface RawAssets {
  script: Uint8Array
  style: Uint8Array
}

const PREBUILT = new URL('./assets/', import.meta.url)
/** The two pages built from ./ui: the console, and the sub-account portal (ui/portal/). */
export type BundleName = 'console' | 'portal'
const ENTRIES: Record<BundleName, string> = { console: './ui/main.tsx', portal: './ui/portal/main.tsx' }
/** The files `npm run build` writes for a bundle: `console.js`, `portal.css`… */
export const filesOf = (name: BundleName) => ({ script: `${name}.js`, style: `${name}.css` })

/** Bytes as the console serves them: also gzipped, and named by a hash of them (the validator). */
export function served(bytes: Uint8Array): { body: Buffer; gzip: Buffer; hash: string; etag: string } {
  const body = Buffer.from(bytes)
  const hash = createHash('sha256').update(body).digest('base64url').slice(0, 16)
  return { body, gzip: gzipSync(body, { level: 9 }), hash, etag: `"${hash}"` }
}

function asset(base: string, ext: 'js' | 'css', bytes: Uint8Array): Asset {
  const { body, gzip, hash, etag } = served(bytes)
  const type = ext === 'js' ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8'
  return { name: `${base}.${hash}.${ext}`, type, body, gzip, etag }
}

/**
 * Bundles ./ui/main.tsx (preact, uPlot and their CSS), or the portal's ./ui/portal/main.tsx, into one
 * script and one stylesheet; `inputs` names the files it read (the server's schemas are not among
 * them: ui/types.ts imports types only).
 */
export async function bundleConsole(name: BundleName = 'console'): Promise<RawAssets & { inputs: string[] }> {
  // Imported here: the image ships prebuilt assets and no esbuild (a development dependency).
  const { build } = await import('esbuild')
  const result = await build({
    entryPoints: [fileURLToPath(new URL(ENTRIES[name], import.meta.url))],
    bundle: true,
    minify: true,
    write: false,
    format: 'esm',
    target: 'es2022',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    outdir: 'out',
    entryNames: name,
    legalComments: 'none',
    logLevel: 'silent',
    metafile: true,
  })
  const pick = (ext: string) => {
    const file = result.outputFiles.find((f) => f.path.endsWith(ext))
    if (file === undefined) throw new Error(`the ${name} bundle has no ${ext} output`)
    return file.contents
  }
  return { script: pick('.js'), style: pick('.css'), inputs: Object.keys(result.metafile.inputs) }
}

/** The files `npm run build` wrote, or undefined when there are none (running from src/). */
export async function readPrebuilt(dir: URL = PREBUILT, name: BundleName = 'console'): Promise<RawAssets | undefined> {
  const files = filesOf(name)
  try {
    const [script, style] = await Promise.all([
      readFile(new URL(files.script, dir)),
      readFile(new URL(files.style, dir)),
    ])
    return { script, style }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
}

export async function loadAssets(
  source: () => Promise<RawAssets | undefined> = () => readPrebuilt(),
  bundle: () => Promise<RawAssets> = bundleConsole,
  name: BundleName = 'console',
): Promise<ConsoleAssets> {
  const raw = (await source()) ?? (await bundle())
  return { script: asset(name, 'js', raw.script), style: asset(name, 'css', raw.style) }
}

/** `load` run once and its result kept; a failure is not kept, so the next call tries again. */
export function keptOnceLoaded<T>(load: () => Promise<T>): () => Promise<T> {
  let kept: Promise<T> | undefined
  return () => {
    if (kept === undefined) {
      kept = load()
      kept.catch(() => {
        kept = undefined
      })
    }
    return kept
  }
}

/** The process's assets: made on first use (a request for the page), once. */
export const consoleAssets = keptOnceLoaded(() => loadAssets())

/** The portal's assets (served by portal/plugin.ts), made on first use too. */
export const portalAssets = keptOnceLoaded(() =>
  loadAssets(
    () => readPrebuilt(PREBUILT, 'portal'),
    () => bundleConsole('portal'),
    'portal',
  ),
)
