// A hold: its seats, a countdown to its expiry, and paying for it with one of the card
// processor simulator's test cards (docs/api.md), or letting it go.
import { useEffect, useState } from "preact/hooks";
import type { components } from "../gen/api";
import { inWords, rest, type Problem } from "../rest";

export type Hold = components["schemas"]["HoldResponse"];

const CARDS: [string, string][] = [
  ["tok_ok", "Test card that pays"],
  ["tok_decline", "Test card that is declined"],
  ["tok_timeout_then_ok", "Slow card, pays later"],
  ["tok_timeout_then_fail", "Slow card, fails later"],
  ["tok_late_settle", "Declined, then settles late"],
];

function left(expiresAt: string): number {
  return Math.max(0, Math.round((Date.parse(expiresAt) - Date.now()) / 1000));
}

/** `session`: the waiting room's session, which orders of a show behind a line carry too. */
export function HoldPanel({ hold, session, onGone }: { hold: Hold; session?: string; onGone: () => void }) {
  const [secs, setSecs] = useState(left(hold.expiresAt));
  const [card, setCard] = useState("tok_ok");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  // One key for this hold's order: a retry (a double click, a lost answer) is the same order.
  const [key] = useState(() => crypto.randomUUID());
  useEffect(() => {
    const t = setInterval(() => setSecs(left(hold.expiresAt)), 1000);
    return () => clearInterval(t);
  }, [hold.expiresAt]);
  async function pay() {
    setBusy(true);
    setError(null);
    const { data, error } = await rest.POST("/v1/orders", {
      body: { holdId: hold.holdId, paymentToken: card },
      params: { header: { "Idempotency-Key": key } },
      headers: session ? { "X-Onsale-Session": session } : {},
    });
    setBusy(false);
    if (data) location.hash = `#/orders/${data.orderId}`;
    else setError(inWords(error as Problem));
  }
  async function release() {
    await rest.DELETE("/v1/holds/{id}", { params: { path: { id: hold.holdId } } });
    onGone();
  }
  const mm = Math.floor(secs / 60);
  const ss = String(secs % 60).padStart(2, "0");
  return (
    <section class="card hold" aria-labelledby="hold-title">
      <h2 id="hold-title">Your seats are held</h2>
      <p data-testid="held-seats">{hold.seatIds.join(", ")}</p>
      <p role="timer" aria-live="off" data-testid="hold-countdown">
        {secs > 0 ? `${mm}:${ss} left to pay` : "Your hold ran out."}
      </p>
      <label>
        Card
        <select value={card} onChange={(e) => setCard(e.currentTarget.value)}>
          {CARDS.map(([token, words]) => (
            <option key={token} value={token}>
              {words} ({token})
            </option>
          ))}
        </select>
      </label>
      <div class="actions">
        <button type="button" onClick={pay} disabled={busy || secs === 0}>
          Pay
        </button>
        <button type="button" class="secondary" onClick={release} disabled={busy}>
          Let the seats go
        </button>
      </div>
      {error ? (
        <p role="alert" class="error">
          {error}
        </p>
      ) : null}
    </section>
  );
}
