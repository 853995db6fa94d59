// The usage chart: one bar a day, stacked by status class, drawn by uPlot on a canvas. The
// numbers it was given are also on the figure (data-series) and in a table, for people who
// cannot see the canvas, and for the tests. A bar's part, clicked, or its number in the table
// leads to those requests (#/requests, filtered by sub-account, day and status class).
import { useEffect, useRef } from 'preact/hooks'
import uPlot from 'uplot'
import { usageRequestsHash } from './request-filters.js'
import { CLASSES, type DailySeries, type StatusClass } from './usage-data.js'

const COLORS: Record<StatusClass, string> = {
  '2xx': '#2e7d32',
  '3xx': '#1565c0',
  '4xx': '#ef6c00',
  '429': '#6a1b9a',
  '5xx': '#c62828',
}
const LABELS: Record<StatusClass, string> = {
  '2xx': '2xx',
  '3xx': '3xx',
  '4xx': '4xx (other)',
  '429': '429 (limits)',
  '5xx': '5xx',
}

/** Stacks the classes: each drawn series is the sum of its class and those below it, tallest first. */
function stacked(series: DailySeries): uPlot.AlignedData {
  const x = series.dates.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000)
  const running = series.dates.map(() => 0)
  const layers = CLASSES.map((c) => series.counts[c].map((v, i) => (running[i]! += v)))
  return [x, ...layers.reverse()]
}

/** The class drawn at `value` on day `i`: the stacked layer whose band holds it, if any. */
function classAt(series: DailySeries, i: number, value: number): StatusClass | null {
  let top = 0
  for (const c of CLASSES) {
    const count = series.counts[c][i] ?? 0
    top += count
    if (count > 0 && value <= top) return c
  }
  return null
}

/** Steps of the requests axis: whole numbers (1, 2, 5, 10, 20, 50…). */
export const WHOLE_STEPS = [1, 2, 5]
  .flatMap((n) => Array.from({ length: 10 }, (_, p) => n * 10 ** p))
  .sort((a, b) => a - b)

/** An axis drawn in the page's text and line colours, read from its CSS variables. */
export function axis(): { stroke: string; grid: { stroke: string }; ticks: { stroke: string } } {
  const style = getComputedStyle(document.documentElement)
  const fg = style.getPropertyValue('--fg').trim() || '#1b1f24'
  const line = style.getPropertyValue('--line').trim() || '#d0d7de'
  return { stroke: fg, grid: { stroke: line }, ticks: { stroke: line } }
}

export function UsageChart({
  series,
  label,
  subAccountId,
}: {
  series: DailySeries
  label: string
  /** Whose requests a bar leads to: a sub-account's, or (null) the whole account's. */
  subAccountId: string | null
}) {
  const box = useRef<HTMLDivElement>(null)
  useEffect(() => {
    const el = box.current
    if (el === null) return
    const bars = uPlot.paths.bars!({ size: [0.7, 48] })
    const plot = new uPlot(
      {
        width: Math.max(el.clientWidth, 280),
        height: 260,
        legend: { show: false },
        cursor: { show: false },
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(max, 1)] } },
        // The axes in the page's colours (the dark theme's too), and whole requests only: an
        // empty chart's axis said 0.2, 0.4… requests.
        axes: [axis(), { ...axis(), size: 50, incrs: WHOLE_STEPS }],
        series: [
          {},
          ...[...CLASSES].reverse().map((c) => ({
            label: LABELS[c],
            fill: COLORS[c],
            stroke: COLORS[c],
            paths: bars,
            points: { show: false },
          })),
        ],
      },
      stacked(series),
      el,
    )
    // A click on a bar shows its requests; the table below offers the same to the keyboard.
    const showRequests = (event: MouseEvent) => {
      const i = plot.posToIdx(event.offsetX)
      const date = series.dates[i]
      const c = date === undefined ? null : classAt(series, i, plot.posToVal(event.offsetY, 'y'))
      if (date !== undefined && c !== null) location.hash = usageRequestsHash(subAccountId, date, c)
    }
    plot.over.addEventListener('click', showRequests)
    plot.over.classList.add('clickable')
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(el.clientWidth, 280), height: 260 }))
    resize.observe(el)
    return () => {
      resize.disconnect()
      plot.destroy()
    }
  }, [series, subAccountId])

  return (
    <figure class="chart" data-testid="usage-chart" data-series={JSON.stringify(series)}>
      <figcaption>{label}</figcaption>
      <div ref={box} class="chart-canvas" role="img" aria-label={`${label}: a bar a day, stacked by status class`} />
      <ul class="legend">
        {CLASSES.map((c) => (
          <li key={c}>
            <span class={`swatch s${c}`} aria-hidden="true" />
            {LABELS[c]}
          </li>
        ))}
      </ul>
      <details>
        <summary>The numbers (days with requests), and their requests</summary>
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Day</th>
                {CLASSES.map((c) => (
                  <th scope="col" key={c}>
                    {LABELS[c]}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {series.dates.map((d, i) =>
                // A day without requests is left out: the chart shows it, the table lists what there is.
                CLASSES.every((c) => (series.counts[c][i] ?? 0) === 0) ? null : (
                  <tr key={d}>
                    <th scope="row">{d}</th>
                    {CLASSES.map((c) => (
                      <td key={c}>
                        <Count count={series.counts[c][i] ?? 0} date={d} c={c} subAccountId={subAccountId} />
                      </td>
                    ))}
                  </tr>
                ),
              )}
            </tbody>
            <tfoot>
              <tr data-testid="usage-total">
                <th scope="row">Total</th>
                {CLASSES.map((c) => (
                  <td key={c}>{series.counts[c].reduce((n, v) => n + v, 0)}</td>
                ))}
              </tr>
            </tfoot>
          </table>
        </div>
      </details>
    </figure>
  )
}

/** A day's count of a class; when there are any, a link to those requests. */
function Count({
  count,
  date,
  c,
  subAccountId,
}: {
  count: number
  date: string
  c: StatusClass
  subAccountId: string | null
}) {
  if (count === 0) return <>0</>
  return (
    <a href={usageRequestsHash(subAccountId, date, c)}>
      {count}
      <span class="visually-hidden">
        {' '}
        {LABELS[c]} on {date}: show these requests
      </span>
    </a>
  )
}
