/**
 * A sparkline in plain SVG: a line over the last samples, the area under it, and a dot at
 * the newest value. Colours come from CSS (theme variables), so it reads in light and dark.
 */

const SVG = 'http://www.w3.org/2000/svg';

export interface ISparklineOptions {
  width: number;
  height: number;
  /** read by screen readers and shown as the tooltip */
  label: string;
  /** an extra class, e.g. to colour throughput and latency apart */
  className?: string;
}

/** `values` oldest first; a null is a gap (no request in that interval). */
export function sparkline(
  values: ReadonlyArray<number | null>,
  options: ISparklineOptions
): SVGSVGElement {
  const { width, height } = options;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute(
    'class',
    `jp-TritonWorkbench-sparkline ${options.className ?? ''}`
  );
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', options.label);
  const title = document.createElementNS(SVG, 'title');
  title.textContent = options.label;
  svg.appendChild(title);
  const points = scale(values, width, height);
  if (points.length === 0) {
    svg.appendChild(baseline(width, height));
    return svg;
  }
  const line = points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`);
  const area = document.createElementNS(SVG, 'polygon');
  const [firstX] = points[0];
  const [lastX, lastY] = points[points.length - 1];
  area.setAttribute(
    'points',
    [
      `${firstX.toFixed(1)},${height}`,
      ...line,
      `${lastX.toFixed(1)},${height}`
    ].join(' ')
  );
  area.setAttribute('class', 'jp-TritonWorkbench-sparklineArea');
  const path = document.createElementNS(SVG, 'polyline');
  path.setAttribute('points', line.join(' '));
  path.setAttribute('class', 'jp-TritonWorkbench-sparklineLine');
  const dot = document.createElementNS(SVG, 'circle');
  dot.setAttribute('cx', lastX.toFixed(1));
  dot.setAttribute('cy', lastY.toFixed(1));
  dot.setAttribute('r', '2');
  dot.setAttribute('class', 'jp-TritonWorkbench-sparklineDot');
  svg.append(area, path, dot);
  return svg;
}

/** Points for the non-null values, x by position in the window, y from 0 to the max. */
function scale(
  values: ReadonlyArray<number | null>,
  width: number,
  height: number
): Array<[number, number]> {
  const present = values.filter((v): v is number => v !== null && isFinite(v));
  if (present.length === 0) {
    return [];
  }
  const top = Math.max(...present) || 1;
  const pad = 2; // keeps the stroke and the dot inside the box
  const step = values.length > 1 ? (width - 2 * pad) / (values.length - 1) : 0;
  const points: Array<[number, number]> = [];
  values.forEach((value, index) => {
    if (value === null || !isFinite(value)) {
      return;
    }
    const y = height - pad - (value / top) * (height - 2 * pad);
    points.push([pad + index * step, y]);
  });
  return points;
}

function baseline(width: number, height: number): SVGLineElement {
  const line = document.createElementNS(SVG, 'line');
  line.setAttribute('x1', '2');
  line.setAttribute('x2', String(width - 2));
  line.setAttribute('y1', String(height - 2));
  line.setAttribute('y2', String(height - 2));
  line.setAttribute('class', 'jp-TritonWorkbench-sparklineEmpty');
  return line;
}
