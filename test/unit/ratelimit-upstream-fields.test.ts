// An upstream's own RateLimit fields beside the gateway's (src/limits/upstream-fields.ts,
// docs/api.md, limits and quotas): its members after the gateway's, those named as a gateway
// policy dropped, whatever form the name takes (a string or a token); what is no list dropped.
import t from 'tap'
import { mergedRateLimitFields } from '../../src/limits/upstream-fields.js'

const GATEWAY = {
  'ratelimit-policy': '"sub_account.rate";q=5;w=600, "account.monthly_quota";q=100;w=2592000',
  ratelimit: '"sub_account.rate";r=2;t=300',
}

t.test("the upstream's members come after the gateway's, its lookalikes dropped", async (t) => {
  t.same(
    mergedRateLimitFields(GATEWAY, {
      ratelimit: '"default";r=9;t=30, sub_account.rate;r=99, ("a" "b");r=1, 7;r=1',
      'ratelimit-policy': ['"default";q=10;w=60', '"account.monthly_quota";q=1;w=1'],
    }),
    {
      ratelimit: '"sub_account.rate";r=2;t=300, "default";r=9;t=30, ("a" "b");r=1, 7;r=1',
      'ratelimit-policy': '"sub_account.rate";q=5;w=600, "account.monthly_quota";q=100;w=2592000, "default";q=10;w=60',
    },
    'a token named as a policy goes too; an inner list and a number, which name none, stay',
  )
})

t.test("nothing left of theirs, or no list at all: the gateway's alone", async (t) => {
  t.same(mergedRateLimitFields(GATEWAY, { ratelimit: '"sub_account.rate";r=99' }), { ratelimit: GATEWAY.ratelimit })
  t.same(mergedRateLimitFields(GATEWAY, { 'ratelimit-policy': '"unclosed' }), {
    'ratelimit-policy': GATEWAY['ratelimit-policy'],
  })
})

t.test("without the gateway's fields, the upstream's pass as sent", async (t) => {
  t.same(mergedRateLimitFields({}, { ratelimit: 'anything, at all;;' }), { ratelimit: 'anything, at all;;' })
  t.same(mergedRateLimitFields({ 'ratelimit-policy': '"p";q=1;w=1' }, { ratelimit: '"x";r=1' }), {
    ratelimit: '"x";r=1',
  })
})
