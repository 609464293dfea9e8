/** uPlot in a Preact component: made once per shape, fed new data in place, resized with its box. */
import { html } from 'htm/preact';
import type { VNode } from 'preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

/** Colours come from the stylesheet's variables, so charts follow the light or dark scheme. */
export function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

export function axis(extra: Partial<uPlot.Axis> = {}): uPlot.Axis {
  const text = cssVar('--muted');
  const grid = cssVar('--grid');
  return { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font: '11px system-ui, sans-serif', ...extra };
}

/** Time axes in UTC, 24-hour: the same clock as every time the dashboard prints. */
export function utcAxis(withSeconds: boolean): uPlot.Axis {
  const cut = withSeconds ? 19 : 16;
  return axis({ values: (_u, splits) => splits.map((s) => new Date(s * 1000).toISOString().slice(11, cut)) });
}

export const bars = (): uPlot.Series.PathBuilder => uPlot.paths.bars!({ size: [0.8, 40], align: 0 });

export interface ChartProps {
  /** Options without size; a new `shape` string makes a new chart (series or axes changed). */
  options: () => Omit<uPlot.Options, 'width' | 'height'>;
  shape: string;
  data: uPlot.AlignedData;
  height: number;
  label: string;
}

export function Chart({ options, shape, data, height, label }: ChartProps): VNode {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const dataRef = useRef(data);
  dataRef.current = data;
  useEffect(() => {
    const el = box.current!;
    const width = Math.max(200, el.clientWidth);
    plot.current = new uPlot({ ...options(), width, height }, dataRef.current, el);
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(200, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [shape, height]);
  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);
  return html`<div class="chart" ref=${box} role="img" aria-label=${label}></div>`;
}
