// A request whose limits are not all warm (a new tenant's first request, the second of a burst
// after an idle second) waits for their first answers, within a deadline, rather than being
// refused a unit the limit still has; out of time, a refusal by limits not known to be reached is
// undecided (a 503 to retry), never a 429 (docs/internals.md, limits).
import { asked, type LeasedLimit } from './leased-limit.js'
import type { Decision, LimitSubject } from './types.js'

/**
 * Resolves once the calls these limits were just asked for are answered. When none could be sent
 * (each is within an empty answer's retry time, which may end after its wait), it resolves when
 * the first may be: awaiting the settled calls instead would loop without ever yielding.
 */
function answered(limits: readonly LeasedLimit[], now: number): Promise<unknown> {
  if (limits.some((limit) => limit.awaitingAnswer())) return Promise.all(limits.map((limit) => limit.settled()))
  const next = Math.min(...limits.map((limit) => limit.nextCallAt))
  return new Promise((resolve) => setTimeout(resolve, Math.max(1, next - now)).unref())
}

/** What the waits need of the limiter. */
export interface Waited {
  now(): number
  applicable(subjects: readonly LimitSubject[], now: number): LeasedLimit[]
  admit(subjects: readonly LimitSubject[], units: number): Decision
  closed(): boolean
}

export class LimitWaits {
  private readonly limiter: Waited
  constructor(limiter: Waited) {
    this.limiter = limiter
  }

  /** See Limiter.warm. */
  async warm(subjects: readonly LimitSubject[], maxWaitMs: number, units: number): Promise<{ timedOut: boolean }> {
    const limiter = this.limiter
    const deadline = limiter.now() + maxWaitMs
    let timer: NodeJS.Timeout | undefined
    let timedOut = false
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        timedOut = true
        resolve()
      }, maxWaitMs)
    })
    try {
      // A quota whose month Redis lost answers after a Postgres read and a second call: rounds.
      for (let round = 0; round < 3 && limiter.now() < deadline; round++) {
        const now = limiter.now()
        const cold = limiter.applicable(subjects, now).filter((limit) => !limit.ready(now, asked(limit, units)))
        if (cold.length === 0) break
        for (const limit of cold) limit.ask(limiter.now(), asked(limit, units))
        await Promise.race([answered(cold, now), late])
      }
    } finally {
      clearTimeout(timer)
    }
    return { timedOut: timedOut || limiter.now() >= deadline }
  }

  /** See Limiter.admitWhenWarm. */
  async admitWhenWarm(subjects: readonly LimitSubject[], maxWaitMs: number, units: number): Promise<Decision> {
    const limiter = this.limiter
    const waitFrom = limiter.now()
    const deadline = waitFrom + maxWaitMs
    for (;;) {
      // Timed out by its own timer too: a timer may fire a little before Date.now() reaches its
      // end (libuv counts from the loop's start), which must not make a cold limit a 429.
      const { timedOut } = await this.warm(subjects, Math.max(1, deadline - limiter.now()), units)
      const decision = limiter.admit(subjects, units)
      const now = limiter.now()
      const late = timedOut || now >= deadline
      if (!decision.allowed && late && this.noneKnownReached(subjects, decision, waitFrom, now, units))
        return { ...decision, undecided: true }
      if (decision.allowed || late || limiter.closed()) return decision
      // Refused by a limit not known to be reached (not read yet, or starved): waits on, as long
      // as the wait lasts. A cold limit's answer may come after warm's rounds (a call that failed
      // while its month was read from Postgres), and is never a 429 before it.
      const unknown = limiter
        .applicable(subjects, now)
        .some(
          (limit) =>
            decision.violated.includes(limit.name) &&
            (limit.mode === 'cold' || limit.starved(now, asked(limit, units))),
        )
      if (!unknown) return decision
    }
  }

  /**
   * Whether no limit that refused is known to be reached: each was not read yet (cold), or is
   * starved (its lease emptied) with no answer from Redis since the wait began. Refused out of
   * time so, a request is a 503 to retry. One that a reached limit refused is a 429 all the same,
   * and so is one a starved rate refused while Redis answered: the units it granted meanwhile went
   * to the requests ahead, so the rate is spent for now, not unknown. A starved quota or credit is
   * unknown however Redis answered: its units do not come back with time, and only an answer that
   * could not cover what was asked says it is spent (a slow process that finds each grant gone to
   * the debt of answers ended meanwhile, or expired on arrival, was refused 402 with 10^12 left).
   */
  private noneKnownReached(
    subjects: readonly LimitSubject[],
    decision: Decision,
    waitFrom: number,
    now: number,
    units: number,
  ): boolean {
    const limits = this.limiter.applicable(subjects, now)
    return (
      decision.violated.length > 0 &&
      decision.violated.every((name) =>
        limits.some(
          (limit) =>
            limit.name === name &&
            !limit.shadow &&
            (limit.mode === 'cold' ||
              (limit.starved(now, asked(limit, units)) && (limit.answeredAt < waitFrom || !limit.refillsInTime()))),
        ),
      )
    )
  }
}
