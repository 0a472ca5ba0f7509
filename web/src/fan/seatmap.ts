// A show's seat map kept live: the snapshot (`SeatMaps.GetSeatMap` with every seat, as a
// bitmap in the layout's order), then its deltas (`SeatMaps.StreamDeltas` of every seat) from
// the snapshot's `seq`. A dropped stream resumes after the last seq it applied; a `resync` (a
// gap the server cannot fill) fetches the snapshot again. When gRPC-web cannot be reached at
// all, the same deltas come over SSE (`/v1/events/{id}/updates?seats=all`, resuming with
// Last-Event-ID), as docs/api.md offers both.
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
  /** Each reserved seat sold (1) or not (0), in the layout's order: the chart's index. Updated
   * in place; `seq` says when it changed. */
  sold: Uint8Array;
  /** The last updates' changed seats (ids) by seq, oldest first, at most `KEPT`: a view
   * that coalesced several updates into one render repaints all of them. */
  changes: { seq: bigint; seats: string[] }[];
  /** Counts the snapshots taken: a new one means every seat may have changed. */
  epoch: number;
  via: "grpc-web" | "sse";
}

/** How many updates' changes a map keeps for views that fall behind (then they look at all). */
export const KEPT = 256;

interface DeltaLike {
  seq: bigint;
  sections: Counts[];
  seats: Pick<SeatState, "seatId" | "status">[];
}

function applied(map: LiveMap, d: DeltaLike, via: LiveMap["via"], index: Map<string, number>): LiveMap {
  if (d.seq <= map.seq) return map; // at least once: what was applied is dropped
  const sections = new Map(map.sections);
  // A delta's counts keep what the snapshot said of the section (a delta may not say it).
  for (const c of d.sections)
    sections.set(c.section, { ...c, generalAdmission: c.generalAdmission || sections.get(c.section)?.generalAdmission });
  const changed: string[] = [];
  for (const s of d.seats) {
    const i = index.get(s.seatId);
    if (i === undefined) continue;
    map.sold[i] = s.status === "SOLD" ? 1 : 0;
    changed.push(s.seatId);
  }
  const changes = [...map.changes.slice(-(KEPT - 1)), { seq: d.seq, seats: changed }];
  return { seq: d.seq, sections, sold: map.sold, changes, epoch: map.epoch, via };
}

/** Bit i of `bytes` (least significant first), for `n` seats. */
function unpack(bytes: Uint8Array, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (bytes[i >> 3] >> (i & 7)) & 1;
  return out;
}

declare global {
  interface Window {
    /** The browser tests' way in: a delta handed to the map as if it had just arrived (the
     * chart's performance test feeds a thousand seat changes a second through it). */
    __deliver?: (d: { seq: bigint; seats: { seatId: string; status: string }[] }) => void;
  }
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((res) => {
    const t = setTimeout(res, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), res()), { once: true });
  });

/** The live map of every seat of `eventId`; `index` maps a seat id to its place in the
 * layout's order (the venue's), `null` until the venue is known. */
export function useSeatMap(eventId: string, index: Map<string, number> | null): LiveMap | null {
  const [map, setMap] = useState<LiveMap | null>(null);
  useEffect(() => {
    if (!index) return;
    const ctl = new AbortController();
    const { signal } = ctl;
    let current: LiveMap | null = null;
    let epoch = 0;
    // Updates are applied as they arrive and shown once a frame: a burst of deltas costs one
    // render, not one each.
    let frame = 0;
    const set = (m: LiveMap) => {
      current = m;
      if (!frame)
        frame = requestAnimationFrame(() => {
          frame = 0;
          setMap(current);
        });
    };
    signal.addEventListener("abort", () => cancelAnimationFrame(frame), { once: true });
    async function snapshot() {
      const m = await seatMaps.getSeatMap({ eventId, allSeats: true }, { signal });
      performance.mark("snapshot-arrived");
      set({
        seq: m.seq,
        sections: new Map(m.sections.map((c) => [c.section, { ...c }])),
        sold: unpack(m.soldSeats, index!.size),
        changes: [],
        epoch: ++epoch,
        via: "grpc-web",
      });
    }
    async function run() {
      let failures = 0;
      while (!signal.aborted) {
        try {
          if (!current) await snapshot();
          for await (const u of seatMaps.streamDeltas({ eventId, allSeats: true, afterSeq: current!.seq }, { signal })) {
            failures = 0;
            if (u.update.case === "delta") set(applied(current!, u.update.value, "grpc-web", index!));
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
      const source = new EventSource(`/v1/events/${eventId}/updates?seats=all`);
      signal.addEventListener("abort", () => source.close(), { once: true });
      source.addEventListener("delta", (e) => {
        const d = JSON.parse((e as MessageEvent).data);
        set(applied(current!, { seq: BigInt(d.seq), sections: d.sections ?? [], seats: d.seats ?? [] }, "sse", index!));
      });
      source.addEventListener("resync", () => {
        current = null;
        snapshot().catch(() => undefined);
      });
    }
    window.__deliver = (d) => {
      if (current) set(applied(current, { ...d, sections: [] }, current.via, index!));
    };
    run();
    return () => ctl.abort();
  }, [eventId, index]);
  return map;
}
