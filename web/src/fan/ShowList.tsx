// The shows: the catalog over gRPC-web (`Events.SearchEvents`), searched as the fan types.
import { useEffect, useState } from "preact/hooks";
import type { EventSummary } from "../gen/onsale/v1/read_pb";
import { events } from "../grpc";

export function ShowList() {
  const [q, setQ] = useState("");
  const [shows, setShows] = useState<EventSummary[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const ctl = new AbortController();
    const t = setTimeout(() => {
      events
        .searchEvents({ q, limit: 50 }, { signal: ctl.signal })
        .then((r) => {
          setShows(r.events);
          setError(null);
        })
        .catch((e) => ctl.signal.aborted || setError(String(e.message ?? e)));
    }, 200);
    return () => {
      clearTimeout(t);
      ctl.abort();
    };
  }, [q]);
  return (
    <section aria-labelledby="shows-title">
      <h1 id="shows-title">Shows</h1>
      <label class="search">
        Search performers, shows and cities
        <input type="search" value={q} onInput={(e) => setQ(e.currentTarget.value)} />
      </label>
      {error ? <p role="alert" class="error">{error}</p> : null}
      {shows === null ? (
        <p>Loading…</p>
      ) : shows.length === 0 ? (
        <p>No show matches.</p>
      ) : (
        <ul class="shows">
          {shows.map((s) => (
            <li key={s.eventId} class="card">
              <a href={`#/events/${s.eventId}`}>
                <strong>{s.performer}</strong> — {s.name}
              </a>
              <div class="meta">
                {s.venueName}, {s.city} · {new Date(s.startsAt).toLocaleString()} · <span class="status">{s.status}</span>
              </div>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
