// The client's size as a browser would load it: src/index.ts bundled and minified by
// esbuild (ES module, every export kept), then gzipped (level 9) and brotli-compressed.
import { build } from "esbuild";
import { brotliCompressSync, gzipSync } from "node:zlib";

const here = new URL("..", import.meta.url).pathname;
const result = await build({
  entryPoints: [`${here}src/index.ts`],
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  write: false,
});
const code = result.outputFiles[0].contents;
const kib = (n) => `${(n / 1024).toFixed(1)} KiB (${n} bytes)`;
console.log(`minified: ${kib(code.length)}`);
console.log(`minified + gzip: ${kib(gzipSync(code, { level: 9 }).length)}`);
console.log(`minified + brotli: ${kib(brotliCompressSync(code).length)}`);
