// The units one replica admitted under a quota that Postgres may not hold yet (docs/internals.md,
// "A month rebuilt from Postgres"): what the replica reports again to a copy of the month that
// Redis rebuilt after it forgot the one the replica last saw.

/** Units admitted within this many ms share one entry (stamped with the latest of them). */
const ENTRY_SPAN_MS = 50
/**
 * The most entries a quota keeps (a minute of them): while Postgres is away the meter's lag, and
 * with it what is kept, has no end, so past this the two oldest merge into one stamped with the
 * later time (kept longer: counted twice at worst, never dropped).
 */
export const MAX_ENTRIES = 1_200

/**
 * Units by the local time (ms) they were admitted, oldest first, in entries of at most
 * ENTRY_SPAN_MS. An entry is stamped with the time of its latest unit, so that one dropped as
 * written (`forgetBefore`) holds no unit admitted at or after the time given: dropping errs on
 * the side of keeping, and so of counting a unit twice rather than not at all.
 */
export class UnwrittenUnits {
  private readonly entries: { first: number; at: number; units: number }[] = []
  private sum = 0

  /** Units admitted at `now`. */
  add(now: number, units: number): void {
    if (units <= 0) return
    const last = this.entries.at(-1)
    // A clock set back stamps them later than they were: kept longer, never forgotten early.
    const at = last === undefined ? now : Math.max(now, last.at)
    if (last !== undefined && at - last.first < ENTRY_SPAN_MS) {
      last.units += units
      last.at = at
    } else {
      this.entries.push({ first: at, at, units })
      if (this.entries.length > MAX_ENTRIES) {
        const oldest = this.entries.shift()!
        const next = this.entries[0]!
        next.first = oldest.first
        next.units += oldest.units
      }
    }
    this.sum += units
  }

  /** Units given back (a request admitted, then not forwarded): taken off the latest entries. */
  remove(units: number): void {
    let left = Math.min(units, this.sum)
    this.sum -= left
    while (left > 0) {
      const last = this.entries.at(-1)!
      const off = Math.min(left, last.units)
      last.units -= off
      left -= off
      if (last.units === 0) this.entries.pop()
    }
  }

  /** Forgets the units admitted before `cutoff` (ms): Postgres holds them. */
  forgetBefore(cutoff: number): void {
    let drop = 0
    while (drop < this.entries.length && this.entries[drop]!.at < cutoff) this.sum -= this.entries[drop++]!.units
    if (drop > 0) this.entries.splice(0, drop)
  }

  /** The units admitted at or after `cutoff` (ms), and some before it (an entry spanning it). */
  since(cutoff: number): number {
    let units = 0
    for (let i = this.entries.length - 1; i >= 0 && this.entries[i]!.at >= cutoff; i--) units += this.entries[i]!.units
    return units
  }

  /** Every unit still held: admitted, and not known to be in Postgres. */
  total(): number {
    return this.sum
  }

  clear(): void {
    this.entries.length = 0
    this.sum = 0
  }
}
