// An order: its status, followed until the payment is decided (a caller always reads its own
// writes, so the order is there at once); then its tickets, each with its rotating code drawn
// as a QR code and fetched again before it stops being valid; and cancelling it.
import QRCode from "qrcode";
import { useEffect, useState } from "preact/hooks";
import type { components } from "../gen/api";
import { inWords, rest, type Problem } from "../rest";

type Order = components["schemas"]["OrderResponse"];

const SETTLED = new Set(["CONFIRMED", "FAILED", "CANCELLED", "REFUNDED"]);
const SAID: Record<string, string> = {
  PENDING_PAYMENT: "Paying…",
  CONFIRMED: "Confirmed: enjoy the show!",
  FAILED: "The payment did not go through; the seats went back on sale.",
  CANCELLED: "Cancelled; the refund is on its way.",
  REFUNDED: "Refunded.",
};
/** Why a FAILED order failed, in a fan's words (the order's `failureReason`). */
const FAILED_BECAUSE: Record<string, string> = {
  CARD_DECLINED: "Your card was declined, so nothing was charged; the seats went back on sale. You can hold them again and pay with another card.",
  PAYMENT_TIMED_OUT:
    "The card processor did not answer in time, so nothing was charged; the seats went back on sale.",
};

function said(order: Order): string {
  if (order.status === "FAILED" && order.failureReason && FAILED_BECAUSE[order.failureReason])
    return FAILED_BECAUSE[order.failureReason];
  return SAID[order.status] ?? order.status;
}

export function OrderPage({ orderId }: { orderId: string }) {
  const [order, setOrder] = useState<Order | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let stop = false;
    rest.GET("/v1/orders/{id}", { params: { path: { id: orderId } } }).then(({ data, error }) => {
      if (stop) return;
      if (data) {
        setOrder(data);
        setError(null);
      } else setError(inWords(error as Problem));
    });
    return () => void (stop = true);
  }, [orderId, tick]);
  useEffect(() => {
    if (order && SETTLED.has(order.status) && (order.status !== "CONFIRMED" || order.tickets.length === order.seatIds.length)) return;
    const t = setTimeout(() => setTick((n) => n + 1), 1000);
    return () => clearTimeout(t);
  }, [order, tick]);
  async function cancel() {
    const { error } = await rest.POST("/v1/orders/{id}/cancel", { params: { path: { id: orderId } } });
    if (error) setError(inWords(error as Problem));
    setTick((n) => n + 1);
  }
  if (!order) return error ? <p role="alert" class="error">{error}</p> : <p>Loading your order…</p>;
  return (
    <section aria-labelledby="order-title">
      <h1 id="order-title">Your order</h1>
      <p
        class="status"
        role="status"
        data-testid="order-status"
        data-status={order.status}
        data-reason={order.failureReason ?? undefined}
      >
        {said(order)}
      </p>
      <p>
        {order.seatIds.join(", ")} · {(order.totalCents / 100).toFixed(2)}
      </p>
      {order.tickets.length ? (
        <ul class="tickets">
          {order.tickets.map((t) => (
            <li key={t.ticketId} class="card">
              <Ticket ticketId={t.ticketId} place={t.generalAdmission ? `General admission (${t.seatId.split("-")[0]})` : `Seat ${t.seatId}`} />
            </li>
          ))}
        </ul>
      ) : null}
      {order.status === "CONFIRMED" ? (
        <button type="button" class="secondary" onClick={cancel}>
          Cancel this order
        </button>
      ) : null}
      {error ? <p role="alert" class="error">{error}</p> : null}
      <p>
        <a href={`#/events/${order.eventId}`}>Back to the show</a>
      </p>
    </section>
  );
}

/** A ticket's code: fetched, drawn, and fetched again a moment before `validUntil`. */
function Ticket({ ticketId, place }: { ticketId: string; place: string }) {
  const [code, setCode] = useState<{ code: string; img: string; validUntil: string } | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stop = false;
    async function load() {
      const { data, error } = await rest.GET("/v1/tickets/{ticketId}/barcode", {
        params: { path: { ticketId } },
      });
      if (stop) return;
      if (!data) {
        setError(inWords(error as Problem));
        return;
      }
      const img = await QRCode.toDataURL(data.code, { margin: 1, width: 220 });
      if (stop) return;
      setCode({ code: data.code, img, validUntil: data.validUntil });
      setError(null);
      const next = Math.max(1000, Date.parse(data.validUntil) - Date.now() - 2000);
      timer = setTimeout(load, next);
    }
    load();
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, [ticketId]);
  return (
    <figure class="ticket" data-testid="ticket" data-code={code?.code}>
      {code ? <img src={code.img} alt={`Entry code: ${place}`} width={220} height={220} /> : null}
      <figcaption>
        {place}
        {code ? <span class="meta"> · this code changes at {new Date(code.validUntil).toLocaleTimeString()}</span> : null}
        {error ? <span role="alert" class="error"> {error}</span> : null}
      </figcaption>
    </figure>
  );
}
