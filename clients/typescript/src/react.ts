/**
 * `tether-client/react`: follow a run from a React component.
 *
 *     <TetherProvider client={new TetherClient({ baseUrl: "" })}>
 *       <Run id={runId} />
 *     </TetherProvider>
 *
 *     function Run({ id }) {
 *       const run = useRun(id);
 *       return <p>{run.status}: {Object.values(run.tokens).join("")}</p>;
 *     }
 *
 * React (18 or later) is an optional peer dependency: only this entry point imports it.
 */
import {
  createContext,
  createElement,
  useCallback,
  useContext,
  useEffect,
  useMemo,
  useState,
  type ReactNode,
} from "react";

import type { TetherClient } from "./client.js";
import { applyEvents, emptyRunState, type RunState } from "./state.js";
import type { EventRecorded, RunEvent } from "./types.js";

const ClientContext = createContext<TetherClient | null>(null);

/** Makes `client` the one useRun() and useTetherClient() use below it. */
export function TetherProvider(props: { client: TetherClient; children?: ReactNode }) {
  return createElement(ClientContext.Provider, { value: props.client }, props.children);
}

/** The client a TetherProvider above gave, or null. */
export function useTetherClient(): TetherClient | null {
  return useContext(ClientContext);
}

export interface UseRunOptions {
  /** The client to use (else the TetherProvider's). */
  client?: TetherClient;
  /** Follow live token text too (default true). */
  tokens?: boolean;
}

export interface UseRun extends RunState {
  /** Why following stopped: a TetherApiError (`unknown_run`, `unauthorized`...), or a
   * StreamGaveUpError; null while all is well. */
  error: unknown;
  /** Answer the run's wait `key` (see `waits`); resolves once the server recorded it. */
  answer: (key: string, payload?: unknown, options?: { eventId?: string }) => Promise<EventRecorded>;
}

/**
 * A run's state, live: status, records (each once, in order, across any reconnect), nodes,
 * the live token text of running turns, the budget, open waits, and `answer(key, payload)`.
 * Re-renders at most once per task however fast events come; stops following when the
 * component unmounts or `runId` changes (the run itself goes on).
 */
export function useRun(runId: string | null | undefined, options: UseRunOptions = {}): UseRun {
  const fromContext = useContext(ClientContext);
  const client = options.client ?? fromContext;
  if (!client) {
    throw new Error("useRun needs a client: render it under <TetherProvider client={...}>");
  }
  const tokens = options.tokens ?? true;
  const id = runId ?? "";
  const [state, setState] = useState<RunState>(() => emptyRunState(id));
  const [error, setError] = useState<{ runId: string; error: unknown } | null>(null);

  useEffect(() => {
    if (!id) return undefined;
    const controller = new AbortController();
    let pending: RunEvent[] = [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    const flush = () => {
      timer = undefined;
      const batch = pending;
      pending = [];
      if (controller.signal.aborted) return;
      setState((s) => applyEvents(s.runId === id ? s : emptyRunState(id), batch));
    };
    setState((s) => (s.runId === id ? s : emptyRunState(id)));
    void (async () => {
      try {
        const after = -1; // from the first record: the state is rebuilt from them all
        for await (const event of client.events(id, { after, tokens, signal: controller.signal })) {
          pending.push(event);
          timer ??= setTimeout(flush, 0); // one render for a burst of events
        }
      } catch (e) {
        if (!controller.signal.aborted) setError({ runId: id, error: e });
      } finally {
        if (timer !== undefined) {
          clearTimeout(timer);
          flush();
        }
      }
    })();
    return () => controller.abort();
  }, [client, id, tokens]);

  const answer = useCallback(
    (key: string, payload?: unknown, opts: { eventId?: string } = {}) =>
      client.signal(id, key, payload, opts),
    [client, id],
  );
  const current = state.runId === id ? state : emptyRunState(id);
  const failure = error !== null && error.runId === id ? error.error : null;
  return useMemo(() => ({ ...current, error: failure, answer }), [current, failure, answer]);
}

export type { BudgetState, NodeState, PendingWait, RunState } from "./state.js";
