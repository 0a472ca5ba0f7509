// The venue drawn whole on a canvas: the stage, the sections placed around it, every seat a dot
// in its price tier's colour (sold seats grey squares, the fan's own a ring: shape as well as
// colour), general-admission floors as areas with their count. Zoom and pan by mouse wheel and
// drag, by pinch, and by keyboard (+ - to zoom, arrows to pan, 0 for the whole venue); a panel
// names the seat under the pointer with its price; a click picks or unpicks a free seat. Only
// the seats a delta changed are repainted. The section list and the keyboard seat grid beside
// it stay the way for screen readers.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { bounds, Grid, Painter, Shown, TIER_COLOURS, whole, zoomed, type Seats, type VenueDoc, type View } from "./chart";
import { KEPT, type LiveMap } from "./seatmap";

interface Props {
  venue: VenueDoc;
  seats: Seats;
  /** The live map: each seat sold or not, and the changes of its last updates. */
  map: LiveMap;
  prices: Record<string, number>;
  currency: string;
  /** The fan's own seats: picked, or held (where a best-available hold landed). */
  mine: Set<string>;
  onPick: (seatId: string) => void;
  floorLabel: (section: string) => string;
}

export function money(cents: number, currency: string): string {
  const format = new Intl.NumberFormat(navigator.language, { style: "currency", currency });
  const digits = format.resolvedOptions().maximumFractionDigits ?? 2;
  return format.format(cents / 10 ** digits);
}

declare global {
  interface Window {
    /** For the browser tests: when the chart last drew whole, and how it shows a seat. */
    __chart?: {
      drawn: number;
      draws: number;
      shown: (seatId: string) => string | null;
      view: () => View;
      /** Where a seat is on the canvas, in CSS pixels from its top left. */
      at: (seatId: string) => [number, number] | null;
    };
  }
}

export function VenueChart({ venue, seats, map, prices, currency, mine, onPick, floorLabel }: Props) {
  const sold = map.sold;
  const canvas = useRef<HTMLCanvasElement>(null);
  const grid = useMemo(() => new Grid(seats), [seats]);
  const shown = useMemo(() => new Uint8Array(seats.ids.length), [seats]);
  // Unknown until the canvas's box is measured: nothing is drawn before (a first draw at a guessed
  // size would be thrown away, and the whole-venue view would change under a fan's fingers).
  const [measured, setSize] = useState<{ width: number; height: number } | null>(null);
  const size = measured ?? { width: 800, height: 600 };
  const [view, setView] = useState<View | null>(null);
  const [hover, setHover] = useState<number>(-1);
  const painter = useRef<Painter | null>(null);
  const drawnView = useRef<View | null>(null);
  const dpr = typeof window === "undefined" ? 1 : window.devicePixelRatio || 1;

  // The canvas follows its box's width; 3:2, at most the window's height.
  useEffect(() => {
    const c = canvas.current!;
    const observer = new ResizeObserver(() => {
      const width = c.clientWidth;
      const height = Math.min(Math.round(width / 1.5), Math.round(window.innerHeight * 0.8));
      setSize((s) => (s && s.width === width && s.height === height ? s : { width, height }));
    });
    observer.observe(c);
    return () => observer.disconnect();
  }, []);
  const area = useMemo(() => bounds(venue.chart), [venue]);
  const fit = useMemo(() => whole(size.width, size.height, area), [size, area]);
  const current = view ?? fit;
  // The view as the last event left it: events that come faster than renders (a pinch moves two
  // fingers at once) build on each other instead of on the view of the last render.
  const live = useRef<View>(current);
  live.current = current;
  const goTo = (next: View) => {
    live.current = next;
    setView(next);
  };

  const statusOf = (i: number): Shown => (mine.has(seats.ids[i]) ? Shown.Mine : sold[i] ? Shown.Sold : Shown.Free);

  // A whole draw when the view, the size or the venue changes.
  useEffect(() => {
    if (!measured) return;
    for (let i = 0; i < shown.length; i++) shown[i] = statusOf(i);
    painter.current ??= new Painter(canvas.current!, venue, seats, shown, floorLabel);
    painter.current.draw(current, size.width, size.height, dpr);
    drawnView.current = current;
    const w = (window.__chart ??= {
      drawn: 0,
      draws: 0,
      shown: () => null,
      view: () => current,
      at: () => null,
    });
    w.drawn = performance.now();
    w.draws += 1;
    w.shown = (id) => {
      const i = seats.index.get(id);
      return i === undefined ? null : ["free", "sold", "mine"][shown[i]];
    };
    w.view = () => drawnView.current ?? current;
    w.at = (id) => {
      const i = seats.index.get(id);
      const v = drawnView.current;
      return i === undefined || !v ? null : [v.scale * seats.x[i] + v.x, v.scale * seats.y[i] + v.y];
    };
    performance.mark("chart-drawn");
  }, [current, measured, seats]);

  // Updates: only the seats they changed are looked at and repainted (every seat after a new
  // snapshot, or when more updates came than the map keeps).
  const seen = useRef<{ epoch: number; seq: bigint }>({ epoch: map.epoch, seq: map.seq });
  useEffect(() => {
    if (!painter.current || !drawnView.current) return;
    const last = seen.current;
    seen.current = { epoch: map.epoch, seq: map.seq };
    const look = (i: number, dirty: number[]) => {
      const now = statusOf(i);
      if (now !== shown[i]) {
        shown[i] = now;
        dirty.push(i);
      }
    };
    const dirty: number[] = [];
    const newer = map.changes.filter((c) => c.seq > last.seq);
    // Updates the map no longer keeps came between the last look and now.
    const lost = map.changes.length >= KEPT && map.changes[0].seq > last.seq + 1n;
    if (last.epoch !== map.epoch || lost) {
      for (let i = 0; i < shown.length; i++) look(i, dirty);
    } else {
      for (const c of newer)
        for (const id of c.seats) {
          const i = seats.index.get(id);
          if (i !== undefined) look(i, dirty);
        }
    }
    if (dirty.length) painter.current.repaint(dirty, drawnView.current, dpr);
    if (newer.length) performance.mark("chart-repainted", { detail: { seqs: newer.map((c) => String(c.seq)) } });
  }, [map]);
  // The fan's own seats (picked, held): those that came or went.
  const lastMine = useRef<Set<string>>(new Set());
  useEffect(() => {
    const before = lastMine.current;
    lastMine.current = mine;
    if (!painter.current || !drawnView.current) return;
    const dirty: number[] = [];
    for (const id of new Set([...before, ...mine])) {
      const i = seats.index.get(id);
      if (i === undefined) continue;
      const now = statusOf(i);
      if (now !== shown[i]) {
        shown[i] = now;
        dirty.push(i);
      }
    }
    if (dirty.length) painter.current.repaint(dirty, drawnView.current, dpr);
  }, [mine]);

  function at(e: { clientX: number; clientY: number }): [number, number] {
    const r = canvas.current!.getBoundingClientRect();
    return [e.clientX - r.left, e.clientY - r.top];
  }
  const toChart = ([px, py]: [number, number]) => {
    const v = live.current;
    return [(px - v.x) / v.scale, (py - v.y) / v.scale];
  };
  const min = fit.scale;
  const max = fit.scale * 40;

  // Pointers: one drags, two pinch.
  const pointers = useRef(new Map<number, [number, number]>());
  const moved = useRef(0);
  function down(e: PointerEvent) {
    canvas.current!.setPointerCapture(e.pointerId);
    pointers.current.set(e.pointerId, at(e));
    moved.current = 0;
  }
  function move(e: PointerEvent) {
    const p = at(e);
    const before = pointers.current.get(e.pointerId);
    if (!before) {
      const [x, y] = toChart(p);
      setHover(grid.nearest(x, y, seats.pitch));
      return;
    }
    if (pointers.current.size === 2) {
      const [a, b] = [...pointers.current.values()];
      const other = a === before ? b : a;
      const was = Math.hypot(before[0] - other[0], before[1] - other[1]);
      const is = Math.hypot(p[0] - other[0], p[1] - other[1]);
      if (was > 0) goTo(zoomed(live.current, is / was, (p[0] + other[0]) / 2, (p[1] + other[1]) / 2, min, max));
    } else {
      const v = live.current;
      goTo({ ...v, x: v.x + p[0] - before[0], y: v.y + p[1] - before[1] });
    }
    moved.current += Math.hypot(p[0] - before[0], p[1] - before[1]);
    pointers.current.set(e.pointerId, p);
  }
  function up(e: PointerEvent) {
    pointers.current.delete(e.pointerId);
    if (moved.current < 4) {
      const [x, y] = toChart(at(e));
      const i = grid.nearest(x, y, seats.pitch);
      if (i >= 0 && shown[i] !== Shown.Sold) onPick(seats.ids[i]);
    }
  }
  function wheel(e: WheelEvent) {
    e.preventDefault();
    const [px, py] = at(e);
    goTo(zoomed(live.current, Math.exp(-e.deltaY / 500), px, py, min, max));
  }
  function key(e: KeyboardEvent) {
    const step = 60;
    const v = live.current;
    const centre = [size.width / 2, size.height / 2] as const;
    const next: Record<string, () => View> = {
      "+": () => zoomed(v, 1.5, ...centre, min, max),
      "=": () => zoomed(v, 1.5, ...centre, min, max),
      "-": () => zoomed(v, 1 / 1.5, ...centre, min, max),
      "0": () => fit,
      ArrowLeft: () => ({ ...v, x: v.x + step }),
      ArrowRight: () => ({ ...v, x: v.x - step }),
      ArrowUp: () => ({ ...v, y: v.y + step }),
      ArrowDown: () => ({ ...v, y: v.y - step }),
    };
    if (next[e.key]) {
      e.preventDefault();
      goTo(next[e.key]());
    }
  }
  useEffect(() => {
    const c = canvas.current!;
    c.addEventListener("wheel", wheel, { passive: false });
    return () => c.removeEventListener("wheel", wheel);
  });

  const seat = hover >= 0 ? hover : -1;
  const section = seat >= 0 ? venue.sections[seats.section[seat]] : null;
  return (
    <div class="chart">
      <ul class="legend" aria-label="Prices">
        {seats.tiers.map((t, i) => (
          <li key={t} data-tier={t}>
            <span class="swatch" style={{ background: TIER_COLOURS[i % TIER_COLOURS.length] }} aria-hidden="true" />
            {t}: {prices[t] === undefined ? "—" : money(prices[t], currency)}
          </li>
        ))}
        <li>
          <span class="swatch sold" aria-hidden="true" /> sold
        </li>
        <li>
          <span class="swatch mine" aria-hidden="true" /> yours
        </li>
      </ul>
      <canvas
        ref={canvas}
        class="venue"
        tabIndex={0}
        role="img"
        aria-label="The venue's chart: the stage and every seat. Zoom with + and -, move with the arrow keys, 0 shows it whole; the section list below picks seats by keyboard."
        data-testid="venue-chart"
        style={measured ? { height: `${measured.height}px` } : undefined}
        onPointerDown={down}
        onPointerMove={move}
        onPointerUp={up}
        onPointerLeave={() => setHover(-1)}
        onKeyDown={key}
      />
      <p class="meta" data-testid="chart-seat" aria-live="polite">
        {seat >= 0 && section
          ? `Section ${section.section}, row ${seats.row[seat]}, seat ${seats.number[seat]} · ${
              prices[section.priceTier] === undefined ? "" : money(prices[section.priceTier], currency)
            } · ${["free", "sold", "yours"][shown[seat]]}`
          : "Point at a seat to see its price; click a free one to pick it."}
      </p>
    </div>
  );
}
