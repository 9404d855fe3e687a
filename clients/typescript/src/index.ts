/**
 * tether-client: the TypeScript client of `tether serve`.
 *
 *     const client = new TetherClient({ baseUrl: "http://127.0.0.1:8000", token });
 *     const { run_id } = await client.start({ agent: "demo", input: { prompt: "hi" } });
 *     for await (const event of client.events(run_id, { tokens: true })) {
 *       if (event.kind === "record") console.log(event.seq, event.data.body);
 *       else if (event.data.type === "token") process.stdout.write(event.data.text ?? "");
 *     }
 *
 * No dependencies: the platform's fetch and streams (Node 20+, current browsers).
 */

export { TetherClient } from "./client.js";
export type { ClientOptions, RequestOptions } from "./client.js";
export {
  StreamGaveUpError,
  TetherApiError,
  TetherError,
  TetherNetworkError,
  retryAfterSeconds,
} from "./errors.js";
export type { ErrorCode, KnownErrorCode } from "./errors.js";
export { SseParser } from "./sse.js";
export type { SseMessage } from "./sse.js";
export type * from "./types.js";
export type { components, paths, operations } from "./openapi.js";
export { applyEvents, emptyRunState, TURN_TEXT } from "./state.js";
export type { BudgetState, NodeState, PendingWait, RunState } from "./state.js";
