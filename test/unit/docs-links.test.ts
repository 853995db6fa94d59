// The docs' links land: every relative link in the docs (docs/*.md, docs/decisions/*.md, README.md,
// CONTRIBUTING.md, bench/README.md) names a file that exists and, with an anchor, a heading in it;
// every decision a comment in src/, test/, scripts/ or bench/ names exists; and docs/decisions.md,
// the index of the decisions, lists every file of docs/decisions/ and nothing else. A decision
// renamed, a heading reworded or a page moved fails here, not in a reader's browser.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join, posix } from 'node:path'
import t from 'tap'

const ROOT = join(import.meta.dirname, '..', '..')
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8')

/** Every file under `dir` (a repository path), as repository paths; node_modules left out. */
function walk(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = posix.join(dir, name)
    if (name === 'node_modules') return []
    return statSync(join(ROOT, path)).isDirectory() ? walk(path) : [path]
  })
}

const DECISIONS = 'docs/decisions'
const INDEX = 'docs/decisions.md'
const decisionFiles = readdirSync(join(ROOT, DECISIONS)).filter((name) => name.endsWith('.md'))

const PAGES = [
  ...readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
  ...decisionFiles.map((name) => `${DECISIONS}/${name}`),
  'README.md',
  'CONTRIBUTING.md',
  'bench/README.md',
]

/** A page's lines outside fenced code blocks, with their numbers, inline code spans blanked. */
function proseLines(text: string): { line: string; n: number }[] {
  let fenced = false
  return text.split('\n').flatMap((raw, i) => {
    if (/^\s*(```|~~~)/.test(raw)) {
      fenced = !fenced
      return []
    }
    return fenced ? [] : [{ line: raw.replace(/`[^`]*`/g, (code) => ' '.repeat(code.length)), n: i + 1 }]
  })
}

/**
 * GitHub's anchor for a heading: the text as shown (links reduced to their text, code marks and
 * emphasis dropped), lower case, every character but letters, digits, `_`, `-` and spaces dropped,
 * spaces made `-`; a repeated one gets `-1`, `-2`, ….
 */
function anchors(page: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  let fenced = false
  for (const line of read(page).split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
    const heading = fenced ? null : /^#{1,6} (.+?)\s*#*\s*$/.exec(line)
    if (heading === null) continue
    const base = heading[1]!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-')
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    out.add(count === 0 ? base : `${base}-${count}`)
  }
  return out
}

const anchorCache = new Map<string, Set<string>>()
const anchorsOf = (page: string) => {
  if (!anchorCache.has(page)) anchorCache.set(page, anchors(page))
  return anchorCache.get(page)!
}

/** Why a link from `from` to `target` (a path relative to `from`'s folder, maybe `#anchor`) does not land, or null. */
function brokenLink(from: string, target: string): string | null {
  const [path = '', anchor] = target.split('#', 2)
  const file = path === '' ? from : posix.normalize(posix.join(posix.dirname(from), decodeURI(path)))
  if (file.startsWith('..')) return `${file} is outside the repository`
  if (!existsSync(join(ROOT, file))) return `${file} does not exist`
  if (anchor === undefined || anchor === '' || !file.endsWith('.md')) return null
  return anchorsOf(file).has(anchor.toLowerCase()) ? null : `${file} has no heading #${anchor}`
}

/** The relative links of a page, `[text](target)`, outside code: web and mail addresses left out. */
function relativeLinks(page: string): { target: string; where: string }[] {
  return proseLines(read(page)).flatMap(({ line, n }) =>
    [...line.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)]
      .map((m) => m[1]!.replace(/^<|>$/g, ''))
      .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target))
      .map((target) => ({ target, where: `${page}:${n}` })),
  )
}

t.test('every relative link in the docs lands on a file, and on a heading where it names one', async (t) => {
  const links = PAGES.flatMap(relativeLinks)
  t.ok(links.length > 300, `the links were found (${links.length})`)
  const broken = links.flatMap(({ target, where }) => {
    const why = brokenLink(where.split(':')[0]!, target)
    return why === null ? [] : [`${where}: (${target}): ${why}`]
  })
  t.same(broken, [], 'links that land nowhere')
})

t.test('every decision a comment names exists', async (t) => {
  const SELF = 'test/unit/docs-links.test.ts'
  const sources = ['src', 'test', 'scripts', 'bench']
    .flatMap(walk)
    .filter((file) => file !== SELF && /\.(ts|tsx|mjs|js|sql|md)$/.test(file))
  const named = sources.flatMap((file) =>
    read(file)
      .split('\n')
      .flatMap((line, i) => [
        ...[...line.matchAll(/docs\/decisions\/[\w.-]+?\.md/g)].map((m) => ({ target: m[0], at: `${file}:${i + 1}` })),
        ...[...line.matchAll(/docs\/decisions\.md#[\w-]+/g)].map((m) => ({ target: m[0], at: `${file}:${i + 1}` })),
      ]),
  )
  t.ok(named.length > 40, `the comments' decisions were found (${named.length})`)
  const broken = named.flatMap(({ target, at }) => {
    const why = brokenLink('README.md', target)
    return why === null ? [] : [`${at}: ${target}: ${why}`]
  })
  t.same(broken, [], 'decisions named in comments that do not exist')
})

t.test('docs/decisions.md lists every decision once, by its number and title, and nothing else', async (t) => {
  const lines = read(INDEX).split('\n')
  const entries = lines.flatMap((line, i) => {
    const m = /^- (\d{4}) \[(.+)\]\(decisions\/([^)]+)\)$/.exec(line)
    return m === null ? [] : [{ number: m[1]!, title: m[2]!, file: m[3]!, at: `${INDEX}:${i + 1}` }]
  })
  t.ok(entries.length >= 300, `the index was found (${entries.length} lines)`)

  const strays = lines.flatMap((line, i) =>
    line.startsWith('- ') && line.includes('](decisions/') && !entries.some((e) => e.at === `${INDEX}:${i + 1}`)
      ? [`${INDEX}:${i + 1}: ${line} (an index line is "- NNNN [Title](decisions/NNNN-slug.md)")`]
      : [],
  )
  t.same(strays, [], 'index lines not in the shape')

  const listed = new Set(entries.map((e) => e.file))
  const unlisted = decisionFiles.filter((name) => !listed.has(name))
  t.same(unlisted, [], 'files of docs/decisions/ missing from the index (a new one: the next number, and its line)')

  const wrong = entries.flatMap(({ number, title, file, at }) => {
    if (!decisionFiles.includes(file)) return [`${at}: decisions/${file} does not exist`]
    if (!file.startsWith(`${number}-`)) return [`${at}: ${number} names ${file}`]
    const heading = read(`${DECISIONS}/${file}`).split('\n')[0]
    return heading === `# ${title}` ? [] : [`${at}: "${title}", but ${file} is titled "${heading}"`]
  })
  t.same(wrong, [], 'index lines that name no such decision, or another one')

  const numbers = entries.map((e) => e.number)
  t.same(
    numbers.filter((n, i) => numbers.indexOf(n) !== i),
    [],
    'numbers used twice',
  )
})

t.test('every decision is numbered and has its title and status', async (t) => {
  const numbered = decisionFiles.map((name) => Number.parseInt(name, 10)).filter((n) => !Number.isNaN(n))
  const next = String(Math.max(0, ...numbered) + 1).padStart(4, '0')
  const misshapen = decisionFiles.flatMap((name) => {
    const [title = '', blank, status = ''] = read(`${DECISIONS}/${name}`).split('\n')
    const faults = [
      /^\d{4}-[a-z0-9]+(-[a-z0-9]+)*\.md$/.test(name)
        ? null
        : `name is not NNNN-slug.md (XXXX: give it the next number, ${next}, and its line in the index)`,
      title.startsWith('# ') ? null : 'first line is not "# <title>"',
      blank === '' && status.startsWith('Status: ') ? null : 'third line is not "Status: …"',
    ].filter((fault) => fault !== null)
    return faults.map((fault) => `${DECISIONS}/${name}: ${fault}`)
  })
  t.same(misshapen, [], 'decision files not in the shape docs/decisions.md gives')
})
