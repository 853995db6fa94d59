// The console's one HTML page: a shell that links the hashed script and stylesheet, so that the
// browser fetches both at once, and no inline code (the Content-Security-Policy allows none). The
// gateway's routes come along as a JSON data block, which no browser runs.
import type { ConsoleAssets } from './assets.js'
import { CONSOLE_ASSETS } from '../shared/paths.js'
import { CONSOLE_ROUTES_ELEMENT, type ConsoleRoute, routesForScript } from './route-list.js'

export function consolePage(assets: ConsoleAssets, routes: readonly ConsoleRoute[] = []): string {
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
</head>
<body>
<div id="app"><p class="boot">Loading the console…</p></div>
<noscript><p>The console needs JavaScript.</p></noscript>
</body>
</html>
`
}
