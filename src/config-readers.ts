// The small readers every setting is parsed with (docs/configuration.md): a variable read, checked
// and turned into a value, or a ConfigError that names it. One home for them, so that config.ts and
// config-redis.ts refuse a bad port, URL or number in the same words.

/** The environment as loadConfig receives it; nothing here reads process.env. */
export type Env = Readonly<Record<string, string | undefined>>

/** A configuration mistake. Its message is one line that names the variable. */
export class ConfigError extends Error {
  readonly variable: string
  constructor(variable: string, problem: string) {
    super(`invalid configuration: ${variable} ${problem}`)
    this.variable = variable
    this.name = 'ConfigError'
  }
}

/** An unset or blank variable counts as unset, as a shell's `VAR=` usually intends. */
export function read(env: Env, name: string): string | undefined {
  const value = env[name]
  return value === undefined || value.trim() === '' ? undefined : value.trim()
}

export function parsePort(env: Env, name: string, fallback: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^\d{1,5}$/.test(raw) || Number(raw) > 65535) {
    throw new ConfigError(name, `must be a port number from 0 to 65535, got "${raw}"`)
  }
  return Number(raw)
}

/**
 * HOST: the address both listeners bind (an IP address or a name), never with a port. `localhost:8081`
 * or `[::1]:8081` is refused, leading with HOST and saying the port goes into PORT; `::1` and other
 * IPv6 addresses without brackets are addresses.
 */
export function parseHost(env: Env): string {
  const raw = read(env, 'HOST') ?? '0.0.0.0'
  const withPort = /^\[([^\]]*)\]:(\d+)$/.exec(raw) ?? /^([^:]*):(\d+)$/.exec(raw)
  if (withPort !== null)
    throw new ConfigError(
      'HOST',
      `is "${raw}": an address without a port; the port belongs in PORT (HOST=${withPort[1]} PORT=${withPort[2]})`,
    )
  return raw
}

export function parseMilliseconds(env: Env, name: string, fallback: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^\d{1,7}$/.test(raw))
    throw new ConfigError(name, `must be a whole number of milliseconds up to 9999999, got "${raw}"`)
  return Number(raw)
}

export function parsePositiveInteger(env: Env, name: string, fallback: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^[1-9]\d{0,8}$/.test(raw))
    throw new ConfigError(name, `must be a whole number from 1 to 999999999, got "${raw}"`)
  return Number(raw)
}

export function parseUrl(env: Env, name: string, protocols: readonly string[]): string | undefined {
  const raw = read(env, name)
  if (raw === undefined) return undefined
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ConfigError(name, `is not a valid URL: write the scheme first, as in ${protocols[0]}//host:port`)
  }
  if (!protocols.includes(url.protocol)) {
    // Never echo the value: a connection string may carry a password.
    throw new ConfigError(
      name,
      `must use one of ${protocols.map((p) => p.replace(':', '://')).join(', ')} (a host and port alone needs one first)`,
    )
  }
  return raw
}

export function parseBoundedInteger(env: Env, name: string, fallback: number, max: number): number {
  const value = parsePositiveInteger(env, name, fallback)
  if (value > max) throw new ConfigError(name, `must be at most ${max}, got "${value}"`)
  return value
}

/** A whole number from 0 to `max`; 0 means off. */
export function parseCount(env: Env, name: string, fallback: number, max: number): number {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (!/^\d{1,9}$/.test(raw) || Number(raw) > max)
    throw new ConfigError(name, `must be a whole number from 0 (off) to ${max}, got "${raw}"`)
  return Number(raw)
}

export function parseBoolean(env: Env, name: string): boolean {
  const raw = read(env, name)
  if (raw === undefined || raw === 'false') return false
  if (raw === 'true') return true
  throw new ConfigError(name, `must be true or false, got "${raw}"`)
}

export function parseOnOff(env: Env, name: string, fallback: boolean): boolean {
  const raw = read(env, name)
  if (raw === undefined) return fallback
  if (raw === 'on') return true
  if (raw === 'off') return false
  throw new ConfigError(name, `must be on or off, got "${raw}"`)
}
