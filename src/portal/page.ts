// The portal's one HTML page (docs/portal.md): a shell that links its hashed script and stylesheet
// (the console's components and CSS, bundled from src/console/ui/portal/), and no inline code.
import type { ConsoleAssets } from '../console/assets.js'
import { PORTAL_ASSETS } from '../shared/paths.js'

export function portalPage(assets: ConsoleAssets): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Account portal</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${PORTAL_ASSETS}/${assets.style.name}">
<script type="module" src="${PORTAL_ASSETS}/${assets.script.name}"></script>
</head>
<body>
<div id="app"><p class="boot">Loading the portal…</p></div>
<noscript><p>The portal needs JavaScript.</p></noscript>
</body>
</html>
`
}
