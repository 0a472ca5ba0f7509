// Where the page's two APIs are: REST on the page's own origin, gRPC-web where the server's
// <meta name="onsale-grpc-web"> says (":PORT" on this page's host, or a whole URL).
export function grpcWebUrl(): string {
  const meta = document.querySelector<HTMLMetaElement>('meta[name="onsale-grpc-web"]');
  const value = meta?.content ?? "";
  if (value.startsWith(":")) return `${location.protocol}//${location.hostname}${value}`;
  if (/^https?:\/\//.test(value)) return value.replace(/\/$/, "");
  // `npm run dev` on :5173 against the local stack's defaults.
  return `${location.protocol}//${location.hostname}:50051`;
}
