// One show: what it is (`Events.GetEvent`), the venue drawn whole with every seat live (the
// chart: pick seats on it), its sections' counts, a section's seats to pick by keyboard (or the
// best available), a general-admission floor's places by quantity, and the hold that follows;
// behind the show's waiting room when it has one.
import { useEffect, useMemo, useState } from "preact/hooks";
import type { components } from "../gen/api";
import type { EventSummary } from "../gen/onsale/v1/read_pb";
import { events } from "../grpc";
import { inWords, rest, type Problem } from "../rest";
import { placeSeats, type VenueDoc } from "./chart";
import { HoldPanel, type Hold } from "./HoldPanel";
import { SeatGrid } from "./SeatGrid";
import { useSeatMap } from "./seatmap";
import { VenueChart } from "./VenueChart";
import { entryOf, useHeartbeat, WaitingRoom, type Entry } from "./WaitingRoom";

type EventDoc = components["schemas"]["EventDoc"];

export function ShowPage({ eventId }: { eventId: string }) {
  const [section, setSection] = useState("");
  // A general-admission section chosen: counts only, no seats to draw.
  const [floor, setFloor] = useState("");
  const [show, setShow] = useState<EventSummary | null>(null);
  const [picked, setPicked] = useState<Set<string>>(new Set());
  const [quantity, setQuantity] = useState(2);
  const [hold, setHold] = useState<Hold | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [entry, setEntry] = useState<Entry | null>(entryOf(eventId));
  const [doc, setDoc] = useState<EventDoc | null>(null);
  const [venue, setVenue] = useState<VenueDoc | null>(null);
  useEffect(() => {
    events.getEvent({ eventId }).then(setShow, () => setShow(null));
    (async () => {
      const e = await rest.GET("/v1/events/{id}", { params: { path: { id: eventId } } });
      if (!e.data) return;
      setDoc(e.data);
      const v = await rest.GET("/v1/venues/{id}", { params: { path: { id: e.data.venueId } } });
      if (v.data) setVenue(v.data);
    })().catch(() => undefined);
  }, [eventId]);
  useHeartbeat(eventId, entry);
  const inLine = !!show?.waitingRoom && !entry;
  const seats = useMemo(() => (venue ? placeSeats(venue) : null), [venue]);
  const map = useSeatMap(eventId, seats?.index ?? null);
  // A seat someone else took leaves the picks.
  useEffect(() => {
    if (!map || !seats) return;
    const still = [...picked].filter((s) => !map.sold[seats.index.get(s) ?? -1]);
    if (still.length !== picked.size) setPicked(new Set(still));
  }, [map]);
  // The chosen section's seats for the keyboard grid.
  const sectionSeats = useMemo(() => {
    const out = new Map<string, string>();
    if (!map || !seats || !section) return out;
    seats.ids.forEach((id, i) => {
      if (venue!.sections[seats.section[i]].section === section) out.set(id, map.sold[i] ? "SOLD" : "AVAILABLE");
    });
    return out;
  }, [map, section]);
  // The fan's own seats on the chart: picked, or held (where a best-available hold landed).
  const mine = useMemo(() => new Set([...picked, ...(hold?.seatIds ?? [])]), [picked, hold]);
  if (!map || !seats || !venue || !doc) return <p>Loading the seat map…</p>;
  const sections = [...map.sections.values()].sort((a, b) => a.section.localeCompare(b.section));
  function toggle(seat: string) {
    const next = new Set(picked);
    if (!next.delete(seat)) next.add(seat);
    setPicked(next);
  }
  async function take(body: { seatIds: string[] } | { quantity: number; section?: string }) {
    setError(null);
    const { data, error } = await rest.POST("/v1/events/{id}/holds", {
      params: { path: { id: eventId }, header: { "Idempotency-Key": crypto.randomUUID() } },
      headers: entry ? { "X-Onsale-Session": entry.sessionId } : {},
      body: body as never,
    });
    if (data) {
      setHold(data);
      setPicked(new Set());
    } else setError(inWords(error as Problem));
  }
  return (
    <section aria-labelledby="map-title">
      <h1 id="map-title">{show ? `${show.performer}: ${show.name}` : "Seat map"}</h1>
      {show ? (
        <p class="meta">
          {show.venueName}, {show.city} · {new Date(show.startsAt).toLocaleString()} · {show.status}
        </p>
      ) : null}
      <p class="meta" data-testid="map-live">
        Live over {map.via} · update {map.seq.toString()}
      </p>
      {inLine ? <WaitingRoom eventId={eventId} onEntered={setEntry} /> : null}
      {hold ? <HoldPanel hold={hold} session={entry?.sessionId} onGone={() => setHold(null)} /> : null}
      <VenueChart
        venue={venue}
        seats={seats}
        map={map}
        prices={doc.prices}
        currency={doc.currency}
        mine={mine}
        onPick={(id) => (!hold && !inLine ? toggle(id) : undefined)}
        floorLabel={(s) => `${s} · ${map.sections.get(s)?.available ?? "?"} left`}
      />
      <table class="sections">
        <caption>Seats by section: pick a section to see its seats</caption>
        <thead>
          <tr>
            <th scope="col">Section</th>
            <th scope="col">Available</th>
            <th scope="col">Held</th>
            <th scope="col">Sold</th>
            <th scope="col">Total</th>
          </tr>
        </thead>
        <tbody>
          {sections.map((c) => (
            <tr key={c.section} data-section={c.section}>
              <th scope="row">
                {c.generalAdmission ? (
                  <button
                    type="button"
                    onClick={() => (setSection(""), setFloor(c.section))}
                    aria-pressed={floor === c.section}
                  >
                    {c.section} <span class="meta">(general admission)</span>
                  </button>
                ) : (
                  <button
                    type="button"
                    onClick={() => (setFloor(""), setSection(c.section))}
                    aria-pressed={section === c.section}
                  >
                    {c.section}
                  </button>
                )}
              </th>
              <td data-testid={`available-${c.section}`}>{c.available}</td>
              <td>{c.held}</td>
              <td>{c.sold}</td>
              <td>{c.total}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {!hold && !inLine ? (
        floor ? (
          <div class="card pick">
            <label>
              How many tickets
              <input type="number" min={1} max={8} value={quantity} onInput={(e) => setQuantity(Number(e.currentTarget.value))} />
            </label>
            <button type="button" onClick={() => take({ quantity, section: floor })}>
              Tickets on {floor}
            </button>
          </div>
        ) : (
          <div class="card pick">
            <label>
              How many seats
              <input type="number" min={1} max={8} value={quantity} onInput={(e) => setQuantity(Number(e.currentTarget.value))} />
            </label>
            <button type="button" onClick={() => take({ quantity, section: section || undefined })}>
              Best available{section ? ` in ${section}` : ""}
            </button>
          </div>
        )
      ) : null}
      {section && sectionSeats.size ? (
        <div class="card">
          <h2>Section {section}</h2>
          <SeatGrid seats={sectionSeats} picked={picked} onToggle={toggle} />
        </div>
      ) : null}
      {!hold && !inLine && picked.size ? (
        <div class="card pick">
          <span data-testid="picked">{[...picked].join(", ")}</span>
          <button type="button" onClick={() => take({ seatIds: [...picked] })}>
            Hold {picked.size} picked seat{picked.size === 1 ? "" : "s"}
          </button>
        </div>
      ) : null}
      {error ? (
        <p role="alert" class="error" data-testid="error">
          {error}
        </p>
      ) : null}
    </section>
  );
}
