// The shows: the catalog over gRPC-web (`Events.SearchEvents`), searched as the fan types, with
// type-ahead under the box (REST `GET /v1/events/suggest`, ADR 033): the arrow keys move through
// the suggestions, Enter takes one (a show opens its page; a performer, venue or city becomes the
// search), Escape closes them. The box is an ARIA combobox, its suggestions a listbox.
import { useEffect, useState } from "preact/hooks";
import type { components } from "../gen/api";
import type { EventSummary, Facets } from "../gen/onsale/v1/read_pb";
import { events } from "../grpc";
import { rest } from "../rest";

type Suggestion = components["schemas"]["Suggestion"];

const KIND: Record<Suggestion["kind"], string> = {
  PERFORMER: "Performer",
  SHOW: "Show",
  VENUE: "Venue",
  CITY: "City",
};

function useSuggestions(typed: string): Suggestion[] {
  const [found, setFound] = useState<Suggestion[]>([]);
  useEffect(() => {
    if (!typed.trim()) {
      setFound([]);
      return;
    }
    const ctl = new AbortController();
    const t = setTimeout(() => {
      rest
        .GET("/v1/events/suggest", { params: { query: { q: typed, limit: 8 } }, signal: ctl.signal })
        .then(({ data }) => data && setFound(data.suggestions))
        // Type-ahead is a help: while it is refused (busy, or the index still reading) the
        // search itself goes on.
        .catch(() => ctl.signal.aborted || setFound([]));
    }, 120);
    return () => {
      clearTimeout(t);
      ctl.abort();
    };
  }, [typed]);
  return found;
}

export function ShowList() {
  const [q, setQ] = useState("");
  const [typed, setTyped] = useState("");
  const [open, setOpen] = useState(false);
  const [active, setActive] = useState(-1);
  const suggestions = useSuggestions(typed);
  const [city, setCity] = useState("");
  const [shows, setShows] = useState<EventSummary[] | null>(null);
  const [facets, setFacets] = useState<Facets | undefined>(undefined);
  const [didYouMean, setDidYouMean] = useState("");
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const ctl = new AbortController();
    const t = setTimeout(() => {
      events
        .searchEvents({ q, city, limit: 50 }, { signal: ctl.signal })
        .then((r) => {
          setShows(r.events);
          setFacets(r.facets);
          setDidYouMean(r.didYouMean);
          setError(null);
        })
        .catch((e) => ctl.signal.aborted || setError(String(e.message ?? e)));
    }, 200);
    return () => {
      clearTimeout(t);
      ctl.abort();
    };
  }, [q, city]);
  useEffect(() => setActive(-1), [suggestions]);
  const shown = open && suggestions.length > 0;
  const choose = (s: Suggestion) => {
    setOpen(false);
    setTyped("");
    if (s.kind === "SHOW" && s.eventId) {
      location.hash = `#/events/${s.eventId}`;
    } else {
      setQ(s.text);
    }
  };
  const onKeyDown = (e: KeyboardEvent) => {
    if (e.key === "ArrowDown" && suggestions.length > 0) {
      e.preventDefault();
      setOpen(true);
      setActive((a) => Math.min(a + 1, suggestions.length - 1));
    } else if (e.key === "ArrowUp" && shown) {
      e.preventDefault();
      setActive((a) => Math.max(a - 1, -1));
    } else if (e.key === "Enter" && shown && active >= 0) {
      e.preventDefault();
      choose(suggestions[active]);
    } else if (e.key === "Escape") {
      setOpen(false);
    }
  };
  return (
    <section aria-labelledby="shows-title">
      <h1 id="shows-title">Shows</h1>
      <div class="typeahead">
        <label class="search" id="search-label">
          Search performers, shows and cities
          <input
            type="search"
            role="combobox"
            aria-autocomplete="list"
            aria-expanded={shown}
            aria-controls="suggestions"
            aria-activedescendant={shown && active >= 0 ? `suggestion-${active}` : undefined}
            autocomplete="off"
            value={q}
            onInput={(e) => {
              const v = e.currentTarget.value;
              setQ(v);
              setTyped(v);
              setOpen(true);
            }}
            onKeyDown={onKeyDown}
            onBlur={() => setOpen(false)}
          />
        </label>
        <ul id="suggestions" role="listbox" aria-labelledby="search-label" class="suggestions" hidden={!shown}>
          {suggestions.map((s, i) => (
            <li
              key={`${s.kind}-${s.eventId ?? s.text}`}
              id={`suggestion-${i}`}
              role="option"
              aria-selected={i === active}
              class={i === active ? "active" : undefined}
              onMouseDown={(e) => {
                e.preventDefault();
                choose(s);
              }}
            >
              <span class="kind">{KIND[s.kind]}</span> {s.text}
              {s.kind === "SHOW" && s.performer ? <span class="meta"> · {s.performer}</span> : null}
            </li>
          ))}
        </ul>
      </div>
      {facets && facets.city.length > 1 ? (
        <div class="facets" role="group" aria-label="Cities">
          {facets.city.map((c) => (
            <button
              type="button"
              key={c.value}
              aria-pressed={city === c.value}
              onClick={() => setCity(city === c.value ? "" : c.value)}
            >
              {c.value} <span class="count">{String(c.count)}</span>
            </button>
          ))}
        </div>
      ) : null}
      {city ? (
        <p class="meta">
          In {city} ·{" "}
          <button type="button" class="link" onClick={() => setCity("")}>
            every city
          </button>
        </p>
      ) : null}
      {error ? <p role="alert" class="error">{error}</p> : null}
      {shows === null ? (
        <p>Loading…</p>
      ) : shows.length === 0 ? (
        <p>
          No show matches.
          {didYouMean ? (
            <>
              {" "}
              Did you mean{" "}
              <button type="button" class="link" onClick={() => setQ(didYouMean)}>
                {didYouMean}
              </button>
              ?
            </>
          ) : null}
        </p>
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
