// The proxied routes written into the console's page (src/console/route-list.ts): JSON that a
// <script> element cannot end early, whatever a prefix or scope holds. The Routes screen itself is
// in test/console/console-webhooks.test.ts.
import t from 'tap'
import { routesForScript } from '../../src/console/route-list.js'

t.test('the list is JSON a script element cannot end early', async (t) => {
  const hostile = [
    {
      prefix: '/a</script><script>alert(1)</script><!--',
      public: false,
      scopes: { read: [], write: [] },
      websocket: null,
      cors: null,
      decided: null,
    },
  ]
  const text = routesForScript(hostile)
  t.notMatch(text, /</, 'no < at all')
  t.same(JSON.parse(text), hostile, 'and it reads back the same')
})
