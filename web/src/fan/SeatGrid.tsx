// A section's seats drawn as SVG, row by row: each free seat a control (click, or Enter/Space
// from the keyboard) that the fan picks or unpicks; sold seats are drawn but not offered.
import type { JSX } from "preact";

interface Props {
  seats: Map<string, string>;
  picked: Set<string>;
  onToggle: (seatId: string) => void;
}

const SIZE = 26;

/** `S1-R2-14` → row `R2`, number 14 (section and row labels are letters and digits). */
function place(seatId: string): { row: string; n: number } {
  const parts = seatId.split("-");
  return { row: parts[parts.length - 2], n: Number(parts[parts.length - 1]) };
}

export function SeatGrid({ seats, picked, onToggle }: Props) {
  const rows = new Map<string, { id: string; n: number; status: string }[]>();
  for (const [id, status] of seats) {
    const { row, n } = place(id);
    if (!rows.has(row)) rows.set(row, []);
    rows.get(row)!.push({ id, n, status });
  }
  const ordered = [...rows.entries()].sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true }));
  const width = Math.max(...ordered.map(([, s]) => Math.max(...s.map((x) => x.n))), 1);
  const key = (id: string) => (e: JSX.TargetedKeyboardEvent<SVGGElement>) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      onToggle(id);
    }
  };
  return (
    <svg
      class="seats"
      role="group"
      aria-label="Seats of the section: pick the free ones you want"
      viewBox={`0 0 ${(width + 2) * SIZE} ${ordered.length * SIZE + 4}`}
    >
      {ordered.map(([row, list], r) => (
        <g key={row}>
          <text x={2} y={r * SIZE + SIZE * 0.7} class="row-label" aria-hidden="true">
            {row}
          </text>
          {list.map((s) => {
            const free = s.status === "AVAILABLE";
            const on = picked.has(s.id);
            return (
              <g
                key={s.id}
                data-seat={s.id}
                role={free ? "checkbox" : "img"}
                aria-checked={free ? on : undefined}
                aria-label={`Row ${row} seat ${s.n}, ${free ? (on ? "picked" : "free") : "sold"}`}
                tabindex={free ? 0 : -1}
                class={`seat ${free ? "free" : "sold"} ${on ? "picked" : ""}`}
                onClick={free ? () => onToggle(s.id) : undefined}
                onKeyDown={free ? key(s.id) : undefined}
              >
                <rect x={(s.n + 0.5) * SIZE} y={r * SIZE + 2} width={SIZE - 4} height={SIZE - 4} rx={4} />
              </g>
            );
          })}
        </g>
      ))}
    </svg>
  );
}
