// One show: what it is (`Events.GetEvent`) and its sections' counts, live. (Seat picking,
// holds, payment and tickets follow.)
import { useEffect, useState } from "preact/hooks";
import type { EventSummary } from "../gen/onsale/v1/read_pb";
import { events } from "../grpc";
import { useSeatMap } from "./seatmap";

export function ShowPage({ eventId }: { eventId: string }) {
  const [section, setSection] = useState("");
  const [show, setShow] = useState<EventSummary | null>(null);
  useEffect(() => {
    events.getEvent({ eventId }).then(setShow, () => setShow(null));
  }, [eventId]);
  const map = useSeatMap(eventId, section);
  if (!map) return <p>Loading the seat map…</p>;
  const sections = [...map.sections.values()].sort((a, b) => a.section.localeCompare(b.section));
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
      <table class="sections">
        <caption>Seats by section</caption>
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
                <button type="button" onClick={() => setSection(c.section)} aria-pressed={section === c.section}>
                  {c.section}
                </button>
              </th>
              <td data-testid={`available-${c.section}`}>{c.available}</td>
              <td>{c.held}</td>
              <td>{c.sold}</td>
              <td>{c.total}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
