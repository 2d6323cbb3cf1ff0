/**
 * The sidebar's search over message text: the server's hits for the query typed, asked SEARCH_DEBOUNCE_MS after the
 * typing stops (a query under MIN_QUERY_CHARS is not asked); the latest query wins (an earlier request is aborted,
 * and its answer ignored if it comes anyway), and the hits shown are always the query's. `refresh` asks again now
 * (Enter): new messages reach the index a moment after their answer.
 */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "../api";
import { searchableQuery, searchConversations, type ConversationSearchHit } from "../conversationSearch";

export const SEARCH_DEBOUNCE_MS = 250;

export interface MessageSearchState {
  /** idle: nothing to search (the query is too short). */
  status: "idle" | "searching" | "done" | "error";
  /** The query asked (searching) or answered: the hits are always this query's (none yet while it is first asked). */
  query: string | null;
  hits: ConversationSearchHit[];
  error: string | null;
}

const IDLE: MessageSearchState = { status: "idle", query: null, hits: [], error: null };

export function useMessageSearch(query: string) {
  const [state, setState] = useState<MessageSearchState>(IDLE);
  const wanted = searchableQuery(query);
  const seq = useRef(0);
  const controller = useRef<AbortController | null>(null);
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);

  const cancel = useCallback(() => {
    seq.current += 1;
    if (timer.current !== null) clearTimeout(timer.current);
    timer.current = null;
    controller.current?.abort();
    controller.current = null;
  }, []);

  const run = useCallback(
    async (q: string) => {
      const mine = seq.current;
      const abort = new AbortController();
      controller.current = abort;
      try {
        const results = await searchConversations(q, { signal: abort.signal });
        if (mine !== seq.current) return;
        setState({ status: "done", query: q, hits: results.data ?? [], error: null });
      } catch (err) {
        if (mine !== seq.current || abort.signal.aborted) return;
        const message = err instanceof ApiError || err instanceof Error ? err.message : "";
        setState((s) => ({ status: "error", query: q, hits: s.hits, error: message || "The search failed." }));
      } finally {
        if (controller.current === abort) controller.current = null;
      }
    },
    [],
  );

  /** Ask for `q` after `delayMs`, dropping whatever was asked before. */
  const schedule = useCallback(
    (q: string | null, delayMs: number) => {
      cancel();
      if (q === null) {
        setState(IDLE);
        return;
      }
      // The same query asked again keeps its hits while it is asked; another query starts with none.
      setState((s) => ({ status: "searching", query: q, hits: s.query === q ? s.hits : [], error: null }));
      const mine = seq.current;
      timer.current = setTimeout(() => {
        timer.current = null;
        if (mine === seq.current) void run(q);
      }, delayMs);
    },
    [cancel, run],
  );

  useEffect(() => {
    schedule(wanted, SEARCH_DEBOUNCE_MS);
  }, [wanted, schedule]);

  useEffect(() => cancel, [cancel]);

  const refresh = useCallback(() => {
    if (wanted !== null) schedule(wanted, 0);
  }, [wanted, schedule]);

  return { state, refresh };
}
