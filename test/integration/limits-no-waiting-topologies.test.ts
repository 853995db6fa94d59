// No waiting (docs/api.md#limits-and-quotas) on Sentinel and on a cluster of the test's own: a
// tenant at twice its rate over three replicas waits for no lease once warm, within its bound
// (limits-no-waiting.test.ts).
import { existsSync } from 'node:fs'
import t from 'tap'
import { deploy, twiceTheRate } from '../helpers/limits-steady.js'
import { endWhenDone } from '../helpers/redis-topologies.js'
import { startUpstream } from '../helpers/upstream.js'

endWhenDone(t, 'sentinel and cluster')
const upstream = await startUpstream(t)

for (const kind of ['sentinel', 'cluster'] as const) {
  // Debian's redis-sentinel, as helpers/redis-topologies.ts starts it, may be missing on a dev machine.
  const skip = kind === 'sentinel' && !existsSync('/usr/bin/redis-sentinel') ? '/usr/bin/redis-sentinel missing' : false
  t.test(`a rate offered twice over on ${kind}: once warm, no request waits`, { skip }, async (t) =>
    twiceTheRate(t, await deploy(t, kind, upstream.url), `twice-${kind}`),
  )
}
