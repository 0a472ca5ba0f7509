// Server-sent events over fetch: EventSource cannot send headers, and the waiting room's
// stream is authorized by two (the bearer token and the queue token).
export interface SseEvent {
  event: string;
  data: string;
}

export async function* sseOver(url: string, headers: Record<string, string>, signal: AbortSignal): AsyncGenerator<SseEvent> {
  const r = await fetch(url, { headers: { ...headers, accept: "text/event-stream" }, signal });
  if (!r.ok || !r.body) throw new Error(`${r.status}`);
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end: number;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      let event = "message";
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: data.join("\n") };
    }
  }
}
