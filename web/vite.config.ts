import preact from "@preact/preset-vite";
import { defineConfig } from "vite";

// The built app goes to dist/ (served by `onsale serve --web-dir web/dist`); `npm run dev`
// serves it on :5173 against the local stack (development mode allows that origin).
export default defineConfig({
  plugins: [preact()],
  build: {
    outDir: "dist",
    assetsDir: "assets",
    sourcemap: true,
    // The app (index.html: `/` and `/ops`) and the API reference (docs.html: `/docs`).
    rollupOptions: { input: { index: "index.html", docs: "docs.html" } },
    // The reference's renderer is one bundle of about 1.1 MB, loaded by /docs only.
    chunkSizeWarningLimit: 1200,
  },
  server: {
    port: 5173,
    proxy: { "/v1": "http://127.0.0.1:8080" },
  },
});
