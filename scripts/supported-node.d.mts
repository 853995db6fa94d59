// Types of scripts/supported-node.mjs (plain JavaScript, run before any TypeScript loader).

/** Negative when `a` (`22.12.0`, `v20.20.2`) is older than `b`, 0 when equal, positive when newer. */
export function compareVersions(a: string, b: string): number
/** The oldest Node package.json's `engines.node` (`>=22.12`) allows: `22.12.0`; throws on another shape. */
export function enginesFloor(packageJson?: URL): string
/** What to do on `version`: nothing, run again on the Node in `run` (saying `say`), or `stop` with that line. */
export function decide(
  version: string,
  floor: string,
  findNode?: () => string,
  versionIn?: (dir: string) => string,
): { run: null } | { run: string; say: string } | { stop: string }
