// The ops console (`/ops`, an admin's): the on-sale as it runs, read every second from
// `GET /v1/ops/metrics` (the process's metrics, for admins; rates from the counters'
// differences), each figure with its last two minutes drawn; the alarms that must stay at zero in red when they are not; which alerting rules
// fire (asked of the Prometheus that evaluates telemetry/alerts, `GET /v1/ops/alerts`); and a
// seat inspector (the seat's whole history, `GET /v1/events/{id}/seats/{seat}/history`).
import { useEffect, useState } from "preact/hooks";
import type { components } from "../gen/api";
import { inWords, rest, type Problem } from "../rest";
import { useSession } from "../session";
import { max, parse, sum, type Sample } from "./metrics";

interface Point {
  at: number;
  s: Sample[];
}

const KEEP = 120;

interface Figure {
  id: string;
  label: string;
  unit: string;
  value: (now: Point, before: Point | undefined) => number | null;
  alarm?: (v: number) => boolean;
}

/** The rate of a counter between two points (per second), or over their increase of another. */
const rate = (name: string, where?: Record<string, string>) => (now: Point, before: Point | undefined) =>
  before ? (sum(now.s, name, where) - sum(before.s, name, where)) / ((now.at - before.at) / 1000) : null;
const share = (name: string, part: Record<string, string>, whole: Record<string, string> = {}) => (now: Point, before: Point | undefined) => {
  if (!before) return null;
  const all = sum(now.s, name, whole) - sum(before.s, name, whole);
  return all > 0 ? (100 * (sum(now.s, name, part) - sum(before.s, name, part))) / all : null;
};
const mean = (name: string, scale = 1) => (now: Point, before: Point | undefined) => {
  if (!before) return null;
  const n = sum(now.s, `${name}_count`) - sum(before.s, `${name}_count`);
  return n > 0 ? (scale * (sum(now.s, `${name}_sum`) - sum(before.s, `${name}_sum`))) / n : null;
};
/** A gauge's value (summed or the largest over its labels); none when no process exports it
 * (no waiting room: no admission gauges). */
const gauge = (name: string, f: typeof sum | typeof max = sum) => (now: Point) =>
  now.s.some((x) => x.name === name) ? f(now.s, name) : null;

const FIGURES: Figure[] = [
  { id: "holds", label: "Hold requests", unit: "/s", value: rate("onsale_hold_requests_total") },
  { id: "conflicts", label: "409 (seat taken)", unit: "%", value: share("onsale_hold_requests_total", { outcome: "SEAT_UNAVAILABLE" }) },
  {
    id: "conversion",
    label: "Holds becoming orders",
    unit: "%",
    value: (now, before) => {
      if (!before) return null;
      const held = sum(now.s, "onsale_events_committed_total", { type: "SeatsHeld" }) - sum(before.s, "onsale_events_committed_total", { type: "SeatsHeld" });
      const ordered = sum(now.s, "onsale_events_committed_total", { type: "OrderPlaced" }) - sum(before.s, "onsale_events_committed_total", { type: "OrderPlaced" });
      return held > 0 ? (100 * ordered) / held : null;
    },
  },
  { id: "queue", label: "In the line", unit: "fans", value: gauge("onsale_queue_depth") },
  { id: "admitted", label: "Admitted through", unit: "", value: gauge("onsale_admitted_through", max) },
  { id: "sessions", label: "Fans in the sale", unit: "", value: gauge("onsale_live_sessions") },
  { id: "target", label: "Fans the sale admits toward (N)", unit: "", value: gauge("onsale_admission_target") },
  { id: "heldback", label: "Lines held back: no seat left", unit: "", value: gauge("onsale_admission_sold_out") },
  { id: "processor", label: "Card processor failing", unit: "", value: gauge("onsale_processor_failing", max), alarm: (v) => v > 0 },
  { id: "admission", label: "Admission, the lowest show (1 = full, 0 = paused)", unit: "", value: gauge("onsale_admission_factor", max), alarm: (v) => v === 0 },
  { id: "commit", label: "Commit latency", unit: "ms", value: mean("onsale_commit_seconds", 1000) },
  { id: "batch", label: "Commands per commit", unit: "", value: mean("onsale_commit_batch_commands") },
  { id: "relay", label: "Relay lag", unit: "bytes", value: gauge("onsale_relay_lag_bytes", max) },
  { id: "projection", label: "Projection lag", unit: "ms", value: gauge("onsale_projection_lag_ms", max) },
  { id: "pending", label: "Payments pending", unit: "", value: gauge("onsale_payment_outbox_depth") },
  { id: "oldest", label: "Oldest payment pending", unit: "s", value: gauge("onsale_payment_oldest_pending_seconds", max) },
  { id: "unknown", label: "Processor answers unknown", unit: "/s", value: rate("onsale_payment_unknown_total") },
  { id: "invariant", label: "Invariant violations", unit: "", value: gauge("onsale_invariant_violations"), alarm: (v) => v > 0 },
  { id: "stalled", label: "Stalled admitters", unit: "", value: gauge("onsale_admission_stalled"), alarm: (v) => v > 0 },
];

function Spark({ values }: { values: (number | null)[] }) {
  const pts = values.map((v, i) => [i, v] as const).filter((p): p is readonly [number, number] => p[1] !== null);
  if (pts.length < 2) return <svg class="spark" aria-hidden="true" />;
  const hi = Math.max(...pts.map((p) => p[1]), 1e-9);
  const d = pts.map(([i, v]) => `${(i / (KEEP - 1)) * 100},${30 - (v / hi) * 28}`).join(" ");
  return (
    <svg class="spark" viewBox="0 0 100 30" preserveAspectRatio="none" aria-hidden="true">
      <polyline points={d} fill="none" stroke="currentColor" stroke-width="1.5" vector-effect="non-scaling-stroke" />
    </svg>
  );
}

function show(v: number | null, unit: string): string {
  if (v === null) return "—";
  const n = Math.abs(v) >= 100 || unit === "bytes" ? Math.round(v).toLocaleString() : v.toFixed(v % 1 ? 2 : 0);
  return unit ? `${n} ${unit}` : n;
}

export function Console() {
  const session = useSession();
  const [points, setPoints] = useState<Point[]>([]);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let stop = false;
    async function poll() {
      try {
        const r = await rest.GET("/v1/ops/metrics", { parseAs: "text" });
        if (r.error !== undefined || r.data === undefined) throw new Error(`${r.response.status}`);
        const s = parse(r.data);
        if (!stop) {
          setPoints((p) => [...p, { at: Date.now(), s }].slice(-KEEP));
          setError(null);
        }
      } catch (e) {
        if (!stop) setError(`/v1/ops/metrics: ${(e as Error).message}`);
      }
    }
    poll();
    const t = setInterval(poll, 1000);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, []);
  if (session?.role !== "admin") {
    return <p role="alert">The ops console is for admins: sign out and sign in as an admin.</p>;
  }
  // Rates over the last 5 s, so one quiet second does not read as zero.
  const series = FIGURES.map((f) => points.map((p, i) => f.value(p, points[Math.max(0, i - 5)] === p ? undefined : points[Math.max(0, i - 5)])));
  return (
    <section aria-labelledby="ops-title">
      <h1 id="ops-title">The on-sale, live</h1>
      {error ? <p role="alert" class="error">{error}</p> : null}
      <ul class="tiles">
        {FIGURES.map((f, i) => {
          const v = series[i][series[i].length - 1] ?? null;
          const alarm = v !== null && f.alarm?.(v);
          return (
            <li key={f.id} class={`tile${alarm ? " alarm" : ""}`} data-testid={`tile-${f.id}`} data-value={v ?? ""}>
              <span class="label">{f.label}</span>
              <strong>{show(v, f.unit)}</strong>
              <Spark values={series[i]} />
            </li>
          );
        })}
      </ul>
      <AlertList />
      <SeatInspector />
    </section>
  );
}

type Rule = components["schemas"]["AlertRule"];

const ORDER: Record<string, number> = { firing: 0, pending: 1, inactive: 2 };

/** The alerting rules and their state, every 2 s. */
function AlertList() {
  const [rules, setRules] = useState<Rule[] | null>(null);
  const [note, setNote] = useState<string | null>(null);
  useEffect(() => {
    let stop = false;
    async function poll() {
      const r = await rest.GET("/v1/ops/alerts").catch(() => null);
      if (stop || !r) return;
      if (r.data) {
        setRules([...r.data.rules].sort((a, b) => (ORDER[a.state] ?? 3) - (ORDER[b.state] ?? 3)));
        setNote(null);
      } else setNote((r.error as Problem | undefined)?.detail ?? `${r.response.status}`);
    }
    poll();
    const t = setInterval(poll, 2000);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, []);
  const firing = rules?.filter((r) => r.state === "firing").length ?? 0;
  return (
    <section class="card" aria-labelledby="alerts-title">
      <h2 id="alerts-title">Alerts {rules ? `(${firing} firing)` : ""}</h2>
      {note ? <p class="meta">{note}</p> : null}
      {rules ? (
        <ul class="alerts">
          {rules.map((r) => (
            <li key={r.name} class={`alert ${r.state}`} data-testid={`alert-${r.name}`} data-state={r.state}>
              <strong>{r.name}</strong> <span class="meta">({r.severity})</span> — {r.state}
              {r.active.map((a, i) => (
                <div key={i} class="meta">
                  {a.summary}
                </div>
              ))}
            </li>
          ))}
        </ul>
      ) : null}
    </section>
  );
}

type History = components["schemas"]["HistoryResponse"];

function SeatInspector() {
  const [eventId, setEventId] = useState("");
  const [seatId, setSeatId] = useState("");
  const [history, setHistory] = useState<History | null>(null);
  const [error, setError] = useState<string | null>(null);
  async function look(e: Event) {
    e.preventDefault();
    setError(null);
    const { data, error } = await rest.GET("/v1/events/{id}/seats/{seat}/history", {
      params: { path: { id: eventId.trim(), seat: seatId.trim() } },
    });
    if (data) setHistory(data);
    else setError(inWords(error as Problem));
  }
  return (
    <section class="card" aria-labelledby="inspector-title">
      <h2 id="inspector-title">Seat inspector</h2>
      <form class="pick" onSubmit={look}>
        <label>
          Show id
          <input value={eventId} onInput={(e) => setEventId(e.currentTarget.value)} required />
        </label>
        <label>
          Seat
          <input value={seatId} onInput={(e) => setSeatId(e.currentTarget.value)} required placeholder="114-K-7" />
        </label>
        <button type="submit">Show its history</button>
      </form>
      {error ? <p role="alert" class="error">{error}</p> : null}
      {history ? (
        <table class="sections" data-testid="history">
          <caption>Every change of seat {history.seatId}</caption>
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">When</th>
              <th scope="col">What</th>
              <th scope="col">Who</th>
              <th scope="col">Hold / order</th>
            </tr>
          </thead>
          <tbody>
            {history.entries.map((h, i) => (
              <tr key={i}>
                <td>{h.sequence}</td>
                <td>{new Date(h.at).toLocaleString()}</td>
                <td>{h.type}</td>
                <td>{h.actor ?? h.accountId ?? ""}</td>
                <td>{h.orderId ?? h.holdId ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}
