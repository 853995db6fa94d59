// A fixed number of places shared fairly between owners (parent accounts): the heavy reads of a
// replica (management/heavy-reads.ts) and its one limit simulation (management/log-reads.ts).
// An owner may have at most `perOwner` calls in the gate, holding a place or waiting for one, and
// hold at most `holdPerOwner` places at once; a place that frees goes to the waiting owner that
// holds the fewest places, then to the one served least recently, then to the one waiting longest. So one owner never holds a place twice while
// another waits, however fast it asks (round robin between owners, FIFO within one).

/** Gives the place back; a second call does nothing. */
export type Leave = () => void

interface Waiter {
  readonly since: number
  start(): void
}

interface Owner {
  /** Calls in the gate, holding a place or waiting. */
  inGate: number
  holding: number
  /** When it was last given a place (a count of places given), -1 if never since it came. */
  lastServed: number
  readonly waiting: Waiter[]
}

export class FairGate {
  private holding = 0
  /** Places given so far, and waiters come: the clocks of fairness and of FIFO. */
  private served = 0
  private arrived = 0
  private readonly owners = new Map<string, Owner>()
  /** How many calls hold a place at once, all owners together. */
  readonly places: number
  /** How many calls of one owner may be in the gate at once, holding or waiting. */
  readonly perOwner: number
  /** How many places one owner may hold at once (its other calls in the gate wait). */
  readonly holdPerOwner: number

  constructor(places: number, perOwner: number, holdPerOwner = perOwner) {
    this.places = places
    this.perOwner = perOwner
    this.holdPerOwner = Math.min(holdPerOwner, perOwner)
  }

  /** Places held now, and calls waiting for one (metrics, tests). */
  get held(): number {
    return this.holding
  }
  get waiting(): number {
    let n = 0
    for (const owner of this.owners.values()) n += owner.waiting.length
    return n
  }

  /**
   * A place for `owner`: null at once when it already has `perOwner` calls in the gate (the caller
   * refuses the call), else a promise of the function that gives the place back. The promise
   * rejects with `signal.reason` if the signal aborts while the call waits (the call's deadline).
   */
  enter(owner: string, signal?: AbortSignal): Promise<Leave> | null {
    let entry = this.owners.get(owner)
    if (entry !== undefined && entry.inGate >= this.perOwner) return null
    // Before an entry is made: a call that never enters leaves nothing behind.
    if (signal?.aborted) return Promise.reject(signal.reason)
    if (entry === undefined) {
      entry = { inGate: 0, holding: 0, lastServed: -1, waiting: [] }
      this.owners.set(owner, entry)
    }
    entry.inGate++
    const ownerEntry = entry
    if (this.holding < this.places && this.waiting === 0 && entry.holding < this.holdPerOwner)
      return Promise.resolve(this.give(owner, ownerEntry))
    return new Promise<Leave>((resolve, reject) => {
      const abort = () => {
        ownerEntry.waiting.splice(ownerEntry.waiting.indexOf(waiter), 1)
        this.out(owner, ownerEntry)
        reject(signal!.reason)
      }
      const waiter: Waiter = {
        since: this.arrived++,
        start: () => {
          signal?.removeEventListener('abort', abort)
          resolve(this.give(owner, ownerEntry))
        },
      }
      ownerEntry.waiting.push(waiter)
      signal?.addEventListener('abort', abort, { once: true })
      // Waiters held back only by their owners' holdPerOwner leave a free place to this one.
      this.next()
    })
  }

  private give(owner: string, entry: Owner): Leave {
    this.holding++
    entry.holding++
    entry.lastServed = this.served++
    let left = false
    return () => {
      if (left) return
      left = true
      this.holding--
      entry.holding--
      this.out(owner, entry)
      this.next()
    }
  }

  /** A call of `entry` leaves the gate; an owner with none left is forgotten. */
  private out(owner: string, entry: Owner): void {
    entry.inGate--
    if (entry.inGate === 0) this.owners.delete(owner)
  }

  /** Gives the free places to the waiters whose turn it is. */
  private next(): void {
    while (this.holding < this.places) {
      let best: Owner | undefined
      for (const entry of this.owners.values()) {
        if (entry.waiting.length === 0 || entry.holding >= this.holdPerOwner) continue
        if (best === undefined || before(entry, best)) best = entry
      }
      if (best === undefined) return
      best.waiting.shift()!.start()
    }
  }
}

/** Whether `a`'s first waiter goes before `b`'s: fewer places held, served longer ago, waiting longer. */
function before(a: Owner, b: Owner): boolean {
  if (a.holding !== b.holding) return a.holding < b.holding
  if (a.lastServed !== b.lastServed) return a.lastServed < b.lastServed
  return a.waiting[0]!.since < b.waiting[0]!.since
}
