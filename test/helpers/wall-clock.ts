// A wall clock a test sets and moves forward: `Date.now()` reads it, and with it everything in the
// process that asks the time of day (the limiter's month, the request log's times and partitions,
// the usage periods). What times durations (`performance.now()`) and the stores' own clocks (Redis's
// TIME, Postgres's now()) go on as they were; so does `new Date()` without an argument, which no
// request's path uses. Install it before anything reads the clock into an option (`?? Date.now`).
const realNow = Date.now.bind(Date)

export interface WallClock {
  /** Moves the clock forward to `ms` (since the epoch); it never goes back. */
  jumpTo(ms: number): void
}

export function installWallClock(startMs: number): WallClock {
  let offsetMs = startMs - realNow()
  Date.now = () => realNow() + offsetMs
  return {
    jumpTo(ms) {
      if (ms < Date.now()) throw new Error(`the wall clock does not go back (to ${new Date(ms).toISOString()})`)
      offsetMs = ms - realNow()
    },
  }
}
