// Whether two JSON values are equal whatever the order of their objects' keys (jsonb comes back
// in its own key order): how a change tells "nothing changed" apart, which writes no event.
function canonical(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value)
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`
  const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  return `{${entries.map(([key, child]) => `${JSON.stringify(key)}:${canonical(child)}`).join(',')}}`
}

export const sameJson = (a: unknown, b: unknown): boolean => canonical(a) === canonical(b)
