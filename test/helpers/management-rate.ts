// The management API's own rate (MANAGEMENT_RATE) is a leased limit: after a second without a
// call a replica keeps one unit of its lease, so the next calls in quick succession may be
// refused (429 rate_limited, management.rate) until the renewal lands a few milliseconds later.
// Tests about something else retry those refusals; every other answer is returned as it came.
import { sleep } from './poll.js'

interface Answer {
  statusCode: number
  body: string
}

function isManagementRateRefusal(res: Answer): boolean {
  if (res.statusCode !== 429) return false
  try {
    const problem = JSON.parse(res.body) as { violated_policies?: string[] }
    return problem.violated_policies?.includes('management.rate') === true
  } catch {
    return false
  }
}

/** Sends again (for up to about a second) while the management rate refuses. */
export async function pastManagementRate<T extends Answer>(send: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const res = await send()
    if (!isManagementRateRefusal(res) || attempt >= 50) return res
    await sleep(20)
  }
}
