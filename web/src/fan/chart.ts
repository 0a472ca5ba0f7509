// The venue chart's engine: every seat's place from the venue's chart (the formula of
// docs/api.md), a grid to find the seat under the pointer, and a canvas painter that draws the
// whole venue once per view and then repaints only the seats that changed.
import type { components } from "../gen/api";

export type ChartDoc = components["schemas"]["Chart"];
export type VenueDoc = components["schemas"]["VenueDoc"];

/** What a seat shows: free to pick, sold (or paying), or the fan's own (picked or held). */
export const enum Shown {
  Free = 0,
  Sold = 1,
  Mine = 2,
}

/** Every reserved seat of the venue, in the layout's order, with where it is drawn. */
export interface Seats {
  ids: string[];
  index: Map<string, number>;
  x: Float32Array;
  y: Float32Array;
  /** The seat's section (its index in the chart) and price tier (index in `tiers`). */
  section: Uint16Array;
  tier: Uint8Array;
  row: string[];
  number: Uint16Array;
  tiers: string[];
  /** The gap between neighbours of a row, at the chart's scale: a seat's size follows it. */
  pitch: number;
}

/** Seat `i` of `n` along a row (docs/api.md): `t = (i + ½) / n` of the way from `from` to `to`,
 * along the straight line, or along the circular arc whose middle bows `bend` off it (to the
 * left of from → to, y down, when positive), at an even pace. The server's `RowLine::at`. */
export function seatAt(from: number[], to: number[], bend: number, i: number, n: number): [number, number] {
  const t = (i + 0.5) / Math.max(n, 1);
  const [x0, y0] = from;
  const [x1, y1] = to;
  const dx = x1 - x0;
  const dy = y1 - y0;
  const len = Math.hypot(dx, dy);
  if (Math.abs(bend) < 1e-9 || len < 1e-9) return [x0 + t * dx, y0 + t * dy];
  const nx = dy / len;
  const ny = -dx / len;
  const mx = (x0 + x1) / 2;
  const my = (y0 + y1) / 2;
  const h = len / 2;
  const radius = (h * h + bend * bend) / (2 * Math.abs(bend));
  const off = bend - Math.sign(bend) * radius;
  const cx = mx + nx * off;
  const cy = my + ny * off;
  const start = Math.atan2(y0 - cy, x0 - cx);
  const middle = Math.atan2(my + ny * bend - cy, mx + nx * bend - cx);
  let half = middle - start;
  if (half > Math.PI) half -= 2 * Math.PI;
  else if (half < -Math.PI) half += 2 * Math.PI;
  const angle = start + 2 * half * t;
  return [cx + radius * Math.cos(angle), cy + radius * Math.sin(angle)];
}

/** Places every reserved seat of `venue` (its layout and its chart). */
export function placeSeats(venue: VenueDoc): Seats {
  const tiers = [...new Set(venue.sections.map((s) => s.priceTier))];
  let total = 0;
  for (const s of venue.sections) if (!s.generalAdmission) total += s.seats;
  const seats: Seats = {
    ids: new Array(total),
    index: new Map(),
    x: new Float32Array(total),
    y: new Float32Array(total),
    section: new Uint16Array(total),
    tier: new Uint8Array(total),
    row: new Array(total),
    number: new Uint16Array(total),
    tiers,
    pitch: Infinity,
  };
  let k = 0;
  venue.sections.forEach((s, si) => {
    if (s.generalAdmission) return;
    const chart = venue.chart.sections[si];
    s.rows.forEach((r, ri) => {
      const line = (chart.rows ?? [])[ri];
      const bend = line.bend ?? 0;
      for (let i = 0; i < r.seats; i++) {
        const [x, y] = seatAt(line.from, line.to, bend, i, r.seats);
        const id = `${s.section}-${r.row}-${i + 1}`;
        seats.ids[k] = id;
        seats.index.set(id, k);
        seats.x[k] = x;
        seats.y[k] = y;
        seats.section[k] = si;
        seats.tier[k] = tiers.indexOf(s.priceTier);
        seats.row[k] = r.row;
        seats.number[k] = i + 1;
        if (i > 0) seats.pitch = Math.min(seats.pitch, Math.hypot(x - seats.x[k - 1], y - seats.y[k - 1]));
        k++;
      }
    });
  });
  if (!Number.isFinite(seats.pitch)) seats.pitch = 40;
  // Rows may lie closer together than seats along a row: a seat's size follows the nearest
  // neighbour in any direction.
  const grid = new Grid(seats, seats.pitch);
  let nearest = seats.pitch;
  for (let i = 0; i < total; i++) {
    const j = grid.nearestOther(i, nearest);
    if (j >= 0) nearest = Math.min(nearest, Math.hypot(seats.x[i] - seats.x[j], seats.y[i] - seats.y[j]));
  }
  seats.pitch = nearest;
  return seats;
}

/** What the chart draws: the stage and every section's outline, a little margin around. */
export function bounds(chart: ChartDoc): { x: number; y: number; width: number; height: number } {
  const { stage } = chart;
  let [x0, y0, x1, y1] = [stage.x, stage.y, stage.x + stage.width, stage.y + stage.height];
  for (const s of chart.sections)
    for (const [x, y] of s.outline) {
      x0 = Math.min(x0, x);
      y0 = Math.min(y0, y);
      x1 = Math.max(x1, x);
      y1 = Math.max(y1, y);
    }
  const m = Math.max(x1 - x0, y1 - y0) * 0.03;
  return { x: x0 - m, y: y0 - m, width: x1 - x0 + 2 * m, height: y1 - y0 + 2 * m };
}

/** A grid over the chart's plane: the seat nearest a point in a few cells' look. */
export class Grid {
  private cells = new Map<number, number[]>();
  constructor(
    private seats: Seats,
    private cell = Math.max(seats.pitch * 2, 1),
  ) {
    for (let i = 0; i < seats.ids.length; i++) {
      const key = this.key(seats.x[i], seats.y[i]);
      const list = this.cells.get(key);
      if (list) list.push(i);
      else this.cells.set(key, [i]);
    }
  }
  private key(x: number, y: number): number {
    return Math.floor(x / this.cell) * 65536 + Math.floor(y / this.cell);
  }
  /** The seat nearest seat `i` other than itself, within `within`; -1: none. */
  nearestOther(i: number, within: number): number {
    const x = this.seats.x[i];
    const y = this.seats.y[i];
    let best = -1;
    let bestD = within * within;
    const cx = Math.floor(x / this.cell);
    const cy = Math.floor(y / this.cell);
    for (let a = cx - 1; a <= cx + 1; a++)
      for (let b = cy - 1; b <= cy + 1; b++)
        for (const s of this.cells.get(a * 65536 + b) ?? []) {
          if (s === i) continue;
          const d = (this.seats.x[s] - x) ** 2 + (this.seats.y[s] - y) ** 2;
          if (d < bestD) {
            bestD = d;
            best = s;
          }
        }
    return best;
  }

  /** The seat within `within` chart units of (x, y), nearest first; -1: none. */
  nearest(x: number, y: number, within: number): number {
    let best = -1;
    let bestD = within * within;
    const cx = Math.floor(x / this.cell);
    const cy = Math.floor(y / this.cell);
    for (let i = cx - 1; i <= cx + 1; i++)
      for (let j = cy - 1; j <= cy + 1; j++)
        for (const s of this.cells.get(i * 65536 + j) ?? []) {
          const d = (this.seats.x[s] - x) ** 2 + (this.seats.y[s] - y) ** 2;
          if (d <= bestD) {
            bestD = d;
            best = s;
          }
        }
    return best;
  }
}

/** The colours of the price tiers, best first: distinct for the common kinds of colour blindness. */
export const TIER_COLOURS = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#7f7f7f"];
const SOLD = "#9aa0a6";
const MINE = "#111111";

/** How the chart's plane maps onto the canvas: `scale` pixels a unit, then moved by (x, y). */
export interface View {
  scale: number;
  x: number;
  y: number;
}

/** Paints the venue on a canvas: the background (stage, sections, floors) and every seat. */
export class Painter {
  private background: HTMLCanvasElement;
  /** The background's pixels, for putting a patch of it back under a seat that changed. */
  private under: ImageData | null = null;
  constructor(
    private canvas: HTMLCanvasElement,
    private venue: VenueDoc,
    private seats: Seats,
    private shown: Uint8Array,
    private floorLabel: (section: string) => string,
  ) {
    this.background = document.createElement("canvas");
  }

  /** The whole chart in `view`. */
  draw(view: View, width: number, height: number, dpr: number) {
    for (const c of [this.canvas, this.background]) {
      c.width = Math.round(width * dpr);
      c.height = Math.round(height * dpr);
    }
    const bg = this.background.getContext("2d", { willReadFrequently: true })!;
    bg.setTransform(dpr * view.scale, 0, 0, dpr * view.scale, dpr * view.x, dpr * view.y);
    bg.fillStyle = "#ffffff";
    bg.fillRect(-view.x / view.scale, -view.y / view.scale, width / view.scale, height / view.scale);
    const { stage } = this.venue.chart;
    bg.fillStyle = "#333333";
    bg.fillRect(stage.x, stage.y, stage.width, stage.height);
    bg.fillStyle = "#ffffff";
    bg.font = `${stage.height * 0.4}px system-ui, sans-serif`;
    bg.textAlign = "center";
    bg.textBaseline = "middle";
    bg.fillText("STAGE", stage.x + stage.width / 2, stage.y + stage.height / 2);
    this.venue.chart.sections.forEach((s, i) => {
      const layout = this.venue.sections[i];
      bg.beginPath();
      s.outline.forEach(([x, y], k) => (k ? bg.lineTo(x, y) : bg.moveTo(x, y)));
      bg.closePath();
      if (layout.generalAdmission) {
        const tier = this.seats.tiers.indexOf(layout.priceTier);
        bg.fillStyle = TIER_COLOURS[(tier < 0 ? 0 : tier) % TIER_COLOURS.length] + "55";
        bg.fill();
        bg.strokeStyle = "#555555";
        bg.lineWidth = 2 / view.scale;
        bg.stroke();
        const cx = s.outline.reduce((a, p) => a + p[0], 0) / s.outline.length;
        const cy = s.outline.reduce((a, p) => a + p[1], 0) / s.outline.length;
        bg.fillStyle = "#111111";
        bg.font = `${14 / view.scale}px system-ui, sans-serif`;
        bg.fillText(this.floorLabel(layout.section), cx, cy);
      } else {
        bg.fillStyle = "#f1f3f4";
        bg.fill();
      }
    });
    this.under = bg.getImageData(0, 0, this.background.width, this.background.height);
    const ctx = this.canvas.getContext("2d")!;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.putImageData(this.under, 0, 0);
    ctx.setTransform(dpr * view.scale, 0, 0, dpr * view.scale, dpr * view.x, dpr * view.y);
    const r = this.radius();
    // Only the seats in sight; seats a few pixels across are squares (a circle that small looks
    // the same and costs more); one path per colour: free seats by tier, then sold, then the
    // fan's own.
    const [left, top] = [-view.x / view.scale - r, -view.y / view.scale - r];
    const [right, bottom] = [left + width / view.scale + 2 * r, top + height / view.scale + 2 * r];
    const { x, y } = this.seats;
    const inSight: number[] = [];
    for (let i = 0; i < this.seats.ids.length; i++)
      if (x[i] >= left && x[i] <= right && y[i] >= top && y[i] <= bottom) inSight.push(i);
    this.tiny = r * view.scale * dpr < 3;
    for (let t = 0; t < this.seats.tiers.length; t++) {
      ctx.beginPath();
      for (const i of inSight) if (this.shown[i] === Shown.Free && this.seats.tier[i] === t) this.dot(ctx, i, r);
      ctx.fillStyle = TIER_COLOURS[t % TIER_COLOURS.length];
      ctx.fill();
    }
    ctx.fillStyle = SOLD;
    const s = r * 0.9;
    for (const i of inSight) if (this.shown[i] === Shown.Sold) ctx.fillRect(x[i] - s / 2, y[i] - s / 2, s, s);
    for (const i of inSight) if (this.shown[i] === Shown.Mine) this.mine(ctx, i, r);
  }

  private tiny = false;

  /** A free seat's shape, added to the current path. */
  private dot(ctx: CanvasRenderingContext2D, i: number, r: number) {
    const x = this.seats.x[i];
    const y = this.seats.y[i];
    if (this.tiny) ctx.rect(x - r, y - r, 2 * r, 2 * r);
    else {
      ctx.moveTo(x + r, y);
      ctx.arc(x, y, r, 0, Math.PI * 2);
    }
  }

  /** A seat's radius: a little under half the gap between neighbours. */
  private radius(): number {
    return this.seats.pitch * 0.42;
  }

  private mine(ctx: CanvasRenderingContext2D, i: number, r: number) {
    ctx.beginPath();
    ctx.arc(this.seats.x[i], this.seats.y[i], r, 0, Math.PI * 2);
    ctx.fillStyle = MINE;
    ctx.fill();
    ctx.beginPath();
    ctx.arc(this.seats.x[i], this.seats.y[i], r * 0.45, 0, Math.PI * 2);
    ctx.fillStyle = "#ffffff";
    ctx.fill();
  }

  /** Repaints only `changed` seats, each over its own patch of the background. */
  repaint(changed: Iterable<number>, view: View, dpr: number) {
    const ctx = this.canvas.getContext("2d")!;
    const r = this.radius();
    const patch = r * 1.1;
    for (const i of changed) {
      const x = this.seats.x[i];
      const y = this.seats.y[i];
      // The background under the seat, in canvas pixels.
      const px = Math.floor(dpr * (view.scale * (x - patch) + view.x));
      const py = Math.floor(dpr * (view.scale * (y - patch) + view.y));
      const side = Math.ceil(dpr * view.scale * patch * 2) + 2;
      if (!this.under || px + side < 0 || py + side < 0 || px > this.canvas.width || py > this.canvas.height) continue;
      ctx.putImageData(this.under, 0, 0, px, py, side, side);
      ctx.setTransform(dpr * view.scale, 0, 0, dpr * view.scale, dpr * view.x, dpr * view.y);
      if (this.shown[i] === Shown.Free) {
        ctx.beginPath();
        this.dot(ctx, i, r);
        ctx.fillStyle = TIER_COLOURS[this.seats.tier[i] % TIER_COLOURS.length];
        ctx.fill();
      } else if (this.shown[i] === Shown.Sold) {
        const s = r * 0.9;
        ctx.fillStyle = SOLD;
        ctx.fillRect(x - s / 2, y - s / 2, s, s);
      } else this.mine(ctx, i, r);
    }
  }
}

/** The view that shows all of `area` (chart units) in a canvas of `width` × `height` pixels. */
export function whole(width: number, height: number, area: ReturnType<typeof bounds>): View {
  const scale = Math.min(width / area.width, height / area.height);
  return {
    scale,
    x: (width - area.width * scale) / 2 - area.x * scale,
    y: (height - area.height * scale) / 2 - area.y * scale,
  };
}

/** `view` zoomed by `factor` about the canvas point (px, py), within sensible bounds. */
export function zoomed(view: View, factor: number, px: number, py: number, min: number, max: number): View {
  const scale = Math.min(max, Math.max(min, view.scale * factor));
  const k = scale / view.scale;
  return { scale, x: px - (px - view.x) * k, y: py - (py - view.y) * k };
}
