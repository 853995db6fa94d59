// Instructions per proxied request, counted by valgrind's callgrind, of one gateway on a route
// whose upstream reports a meter (`tokens`, 42 units an answer), acting as two sub-accounts of two
// parents in turn: `credit`, whose credit of the meter is required and granted 10^12 units (never
// exhausted), and `none`, with no limit at all. The ratio credit/none is what a required credit
// costs a request on the proxy's path (docs/api.md, Credits), in the same process, the same run.
// bench/README.md.
import { countInTurn, inTurnBench, medianLine, ratioLine, seedOutsideValgrind, valgrindHead } from './callgrind.js'
import { envInt, fmt, PROXIED_PATH, run, seedCredited, startUpstream } from './lib.js'

const WARMUP_REQUESTS = envInt('BENCH_WARMUP_REQUESTS', 2_000)
const REQUESTS = envInt('BENCH_REQUESTS', 1_000)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
/** Few: each waits its turn in the gateway's loop, under valgrind a hundred times slower, and so do its store lookups. */
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 8)

run(() =>
  inTurnBench('credit_instructions', async ({ callgrind, databaseUrl, started, config, startCounted }) => {
    const upstream = await startUpstream({ meter: true })
    started.push(upstream)
    const env = config(
      `routes:\n  - prefix: /v1/things\n    upstream: ${upstream.url}\n    meters: [{ name: tokens, header: X-Tokens-Used }]\n`,
    )
    const none = await seedOutsideValgrind(databaseUrl, upstream.url, { env })
    const credit = await seedOutsideValgrind(databaseUrl, upstream.url, { env, seed: seedCredited })
    const gateway = await startCounted(upstream.url, env)
    const rounds = await countInTurn(
      gateway,
      { none: { headers: none }, credit: { headers: credit } },
      {
        warmup: WARMUP_REQUESTS,
        requests: REQUESTS,
        rounds: ROUNDS,
        connections: CONNECTIONS,
        outDir: callgrind.outDir,
      },
    )
    console.log(
      [
        ...valgrindHead('bench:credit-instructions', callgrind.collect),
        `load      GET ${PROXIED_PATH}, ${CONNECTIONS} keep-alive connections; ${fmt(WARMUP_REQUESTS)} requests a side uncounted, then ${ROUNDS} rounds of ${fmt(REQUESTS)} counted a side, in turn`,
        `sides     credit: a sub-account whose credit of tokens is required, 10^12 granted; none: a sub-account without limits; one route reporting tokens (42 an answer)`,
        '',
        medianLine('credit', rounds.credit),
        medianLine('none', rounds.none),
        '',
        `${ratioLine('credit / none', rounds.credit, rounds.none)} (target ≤ 1.03)`,
      ].join('\n'),
    )
  }),
)
