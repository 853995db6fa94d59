// A meter's burn-down: the units left in a sub-account's live grants over time, a step at each
// point of GET …/credits/history (a grant up, a period's burns, an expiry or a void down), drawn by
// uPlot on a canvas. The points it was given are also on the figure (data-series) and in a table,
// for people who cannot see the canvas, and for the tests.
import { useEffect, useRef } from 'preact/hooks'
import uPlot from 'uplot'
import { axis, WHOLE_STEPS } from './chart.js'
import { formatTime } from './components.js'
import type { CreditSeries } from './types.js'

/** What each kind of point says in the table. */
const KIND_TEXT: Record<CreditSeries['points'][number]['kind'], string> = {
  start: 'Left at the start',
  granted: 'Granted',
  burned: 'Burned by use',
  expired: 'Expired (what was left)',
  voided: 'Voided (what was left)',
  end: 'Left at the end',
}

export function CreditChart({ series, label }: { series: CreditSeries; label: string }) {
  const box = useRef<HTMLDivElement>(null)
  useEffect(() => {
    const el = box.current
    if (el === null) return
    const style = getComputedStyle(document.documentElement)
    const accent = style.getPropertyValue('--accent').trim() || '#0b57d0'
    const x = series.points.map((p) => Date.parse(p.at) / 1000)
    const y = series.points.map((p) => p.units_left)
    const plot = new uPlot(
      {
        width: Math.max(el.clientWidth, 280),
        height: 220,
        legend: { show: false },
        cursor: { show: false },
        scales: {
          x: { time: true },
          // Zero stays in sight: a burn-down is read against it.
          y: { range: (_u, min, max) => [Math.min(min, 0), Math.max(max, 1)] },
        },
        axes: [axis(), { ...axis(), size: 70, incrs: WHOLE_STEPS }],
        series: [
          {},
          {
            label: `${series.meter} left`,
            stroke: accent,
            width: 2,
            // Each point holds until the next: units are left, not interpolated.
            paths: uPlot.paths.stepped!({ align: 1 }),
            points: { show: false },
          },
        ],
      },
      [x, y],
      el,
    )
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(el.clientWidth, 280), height: 220 }))
    resize.observe(el)
    return () => {
      resize.disconnect()
      plot.destroy()
    }
  }, [series])

  const first = series.points[0]!
  const last = series.points[series.points.length - 1]!
  return (
    <figure class="chart" data-testid={`credit-chart ${series.meter}`} data-series={JSON.stringify(series.points)}>
      <figcaption>{label}</figcaption>
      <div
        ref={box}
        class="chart-canvas credit-canvas"
        role="img"
        aria-label={`${label}: from ${first.units_left} to ${last.units_left} ${series.meter} left, a step at each change`}
      />
      <details>
        <summary>The numbers: each change of {series.meter} left</summary>
        <div class="table-wrap">
          <table class="cards">
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">What</th>
                <th scope="col">Change</th>
                <th scope="col">Left after</th>
              </tr>
            </thead>
            <tbody>
              {series.points.map((p, i) => (
                <tr key={i}>
                  <td data-label="When">{formatTime(p.at)}</td>
                  <td data-label="What">{KIND_TEXT[p.kind]}</td>
                  <td data-label="Change">{p.change > 0 ? `+${p.change}` : p.change}</td>
                  <td data-label="Left after">{p.units_left}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </figure>
  )
}
