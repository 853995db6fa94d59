// The console's one HTML page: a shell that links the hashed script and stylesheet, so that the
// browser fetches both at once, and no inline code (the Content-Security-Policy allows none). The
// gateway's routes come along as a JSON data block, which no browser runs.
import type { ConsoleAssets } from './assets.js'
import { CONSOLE_ASSETS } from '../shared/paths.js'
import {
  CONSOLE_ROUTES_ELEMENT,
  CONSOLE_TRACE_URL_ELEMENT,
  type ConsoleRoute,
  jsonForScript,
  routesForScript,
} from './route-list.js'

/** `traceUrl`: TRACE_URL_TEMPLATE, which links a request's trace id to its trace (null: unset). */
export function consolePage(
  assets: ConsoleAssets,
  routes: readonly ConsoleRoute[] = [],
  traceUrl: string | null = null,
): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>tenancy-gateway console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${CONSOLE_ASSETS}/${assets.style.name}">
<script type="module" src="${CONSOLE_ASSETS}/${assets.script.name}"></script>
<script type="application/json" id="${CONSOLE_ROUTES_ELEMENT}">${routesForScript(routes)}</script>
<script type="application/json" id="${CONSOLE_TRACE_URL_ELEMENT}">${jsonForScript(traceUrl)}</script>
</head>
<body>
<div id="app"><p class="boot">Loading the console…</p></div>
<noscript><p>The console needs JavaScript.</p></noscript>
</body>
</html>
`
}
