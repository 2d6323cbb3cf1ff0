/// <reference types="vitest/config" />
import preact from "@preact/preset-vite";
import { defineConfig } from "vite";

// The gateway serves dist/ at "/" (index.html) and "/assets/*" under a strict CSP (script-src 'self';
// style-src 'self'): no inline script or style may be emitted, hence no module-preload polyfill.
export default defineConfig({
  plugins: [preact()],
  base: "/",
  build: {
    outDir: "dist",
    assetsDir: "assets",
    emptyOutDir: true,
    modulePreload: { polyfill: false },
    // Never inline assets as data: URLs into CSS/JS (keeps everything a same-origin file).
    assetsInlineLimit: 0,
    cssCodeSplit: false,
    sourcemap: false,
    target: "es2020",
    reportCompressedSize: true,
  },
  server: {
    proxy: {
      "/v1": { target: "http://127.0.0.1:8000", changeOrigin: false },
    },
  },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.{ts,tsx}", "tests/**/*.test.{ts,tsx}"],
  },
});
