// `/docs`: the API reference, drawn by Redoc from the OpenAPI document this server serves.
// Redoc's standalone bundle comes from npm with the build (an asset of its own, loaded as the
// classic script it is): nothing is loaded from the internet.
import redocUrl from "redoc/bundles/redoc.standalone.js?url";

interface RedocGlobal {
  init(spec: string, options: Record<string, unknown>, element: HTMLElement | null, done?: () => void): void;
}

const root = document.getElementById("docs");
const script = document.createElement("script");
script.src = redocUrl;
script.onload = () => {
  const redoc = (globalThis as unknown as { Redoc?: RedocGlobal }).Redoc;
  if (!redoc) throw new Error("Redoc's bundle did not load");
  redoc.init("/openapi.json", { expandResponses: "200,201,202", hideHostname: true }, root, () =>
    document.body.setAttribute("data-docs", "ready"),
  );
};
script.onerror = () => {
  if (root) root.textContent = "The API reference could not be drawn; the OpenAPI document is at /openapi.json.";
};
document.head.append(script);
