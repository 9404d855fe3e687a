// The client's size as a browser would load it: each entry point bundled and minified by
// esbuild (ES module, every export kept; React left out of tether-client/react), then
// gzipped (level 9) and brotli-compressed.
import { build } from "esbuild";
import { brotliCompressSync, gzipSync } from "node:zlib";

const here = new URL("..", import.meta.url).pathname;
const kib = (n) => `${(n / 1024).toFixed(1)} KiB (${n} bytes)`;
for (const [name, entry] of [["tether-client", "src/index.ts"], ["tether-client/react", "src/react.ts"]]) {
  const result = await build({
    entryPoints: [`${here}${entry}`],
    bundle: true,
    minify: true,
    format: "esm",
    target: "es2022",
    external: ["react"],
    write: false,
  });
  const code = result.outputFiles[0].contents;
  console.log(
    `${name}: minified ${kib(code.length)}, + gzip ${kib(gzipSync(code, { level: 9 }).length)}, ` +
      `+ brotli ${kib(brotliCompressSync(code).length)}`,
  );
}
