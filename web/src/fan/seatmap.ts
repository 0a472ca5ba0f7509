// A show's seat map kept live: the snapshot (`SeatMaps.GetSeatMap`), then its deltas
// (`SeatMaps.StreamDeltas`) from the snapshot's `seq`. A dropped stream resumes after the last
// seq it applied; a `resync` (a gap the server cannot fill) fetches the snapshot again. When
// gRPC-web cannot be reached at all, the same deltas come over SSE (`/v1/events/{id}/updates`,
// resuming with Last-Event-ID), as docs/api.md offers both.
import { useEffect, useState } from "preact/hooks";
import type { SeatState, SectionCounts } from "../gen/onsale/v1/read_pb";
import { seatMaps } from "../grpc";

/** A section's counts as the snapshot and the deltas carry them (an SSE delta published before
 * general admission existed says nothing of it). */
export type Counts = Omit<SectionCounts, "$typeName" | "$unknown" | "generalAdmission"> & {
  generalAdmission?: boolean;
};

export interface LiveMap {
  seq: bigint;
  sections: Map<string, Counts>;
  seats: Map<string, string>;
  via: "grpc-web" | "sse";
}

interface DeltaLike {
  seq: bigint;
  sections: Counts[];
  seats: Pick<SeatState, "seatId" | "status">[];
}

function applied(map: LiveMap, d: DeltaLike, via: LiveMap["via"]): LiveMap {
  if (d.seq <= map.seq) return map; // at least once: what was applied is dropped
  const sections = new Map(map.sections);
  // A delta's counts keep what the snapshot said of the section (a delta may not say it).
  for (const c of d.sections)
    sections.set(c.section, { ...c, generalAdmission: c.generalAdmission || sections.get(c.section)?.generalAdmission });
  const seats = new Map(map.seats);
  for (const s of d.seats) seats.set(s.seatId, s.status);
  return { seq: d.seq, sections, seats, via };
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((res) => {
    const t = setTimeout(res, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), res()), { once: true });
  });

export function useSeatMap(eventId: string, section: string): LiveMap | null {
  const [map, setMap] = useState<LiveMap | null>(null);
  useEffect(() => {
    const ctl = new AbortController();
    const { signal } = ctl;
    let current: LiveMap | null = null;
    const set = (m: LiveMap) => {
      current = m;
      setMap(m);
    };
    async function snapshot() {
      const m = await seatMaps.getSeatMap({ eventId, section }, { signal });
      set({
        seq: m.seq,
        sections: new Map(m.sections.map((c) => [c.section, { ...c }])),
        seats: new Map(m.seats.map((s) => [s.seatId, s.status])),
        via: "grpc-web",
      });
    }
    async function run() {
      let failures = 0;
      while (!signal.aborted) {
        try {
          if (!current) await snapshot();
          for await (const u of seatMaps.streamDeltas({ eventId, section, afterSeq: current!.seq }, { signal })) {
            failures = 0;
            if (u.update.case === "delta") set(applied(current!, u.update.value, "grpc-web"));
            else if (u.update.case === "resync") {
              current = null;
              break;
            }
          }
        } catch {
          if (signal.aborted) return;
          failures += 1;
          if (failures >= 3 && current) return sse();
        }
        await sleep(Math.min(500 * 2 ** failures, 5000), signal);
      }
    }
    function sse() {
      const q = section ? `?section=${encodeURIComponent(section)}` : "";
      const source = new EventSource(`/v1/events/${eventId}/updates${q}`);
      signal.addEventListener("abort", () => source.close(), { once: true });
      source.addEventListener("delta", (e) => {
        const d = JSON.parse((e as MessageEvent).data);
        set(
          applied(
            current!,
            { seq: BigInt(d.seq), sections: d.sections ?? [], seats: d.seats ?? [] },
            "sse",
          ),
        );
      });
      source.addEventListener("resync", () => {
        current = null;
        snapshot().catch(() => undefined);
      });
    }
    run();
    return () => ctl.abort();
  }, [eventId, section]);
  return map;
}
