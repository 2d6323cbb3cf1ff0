/** The sidebar's message search against a scripted server: debounced, the latest query winning, errors, Enter. */
import { h, render } from "preact";
import { act } from "preact/test-utils";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../api";
import { searchConversations, type ConversationSearchHit, type ConversationSearchResults } from "../conversationSearch";
import { SEARCH_DEBOUNCE_MS, useMessageSearch } from "./useMessageSearch";

vi.mock("../conversationSearch", async (importOriginal) => {
  const actual = await importOriginal<typeof import("../conversationSearch")>();
  return { ...actual, searchConversations: vi.fn() };
});
const search = vi.mocked(searchConversations);

interface Pending {
  query: string;
  signal: AbortSignal | undefined;
  resolve(results: ConversationSearchResults): void;
  reject(err: unknown): void;
}

let pending: Pending[] = [];
let current!: ReturnType<typeof useMessageSearch>;
let root: HTMLElement;

function Harness({ query }: { query: string }) {
  current = useMessageSearch(query);
  return null;
}

async function type(query: string) {
  await act(async () => {
    render(h(Harness, { query }), root);
  });
}

async function flush(ms = 0) {
  await act(async () => {
    await vi.advanceTimersByTimeAsync(ms);
  });
}

function hit(conversation: string, snippet: string): ConversationSearchHit {
  return {
    object: "conversation.search_hit",
    conversation_id: conversation,
    title: null,
    message_id: 0,
    role: "user",
    created_at: 1,
    updated_at: 1,
    snippet,
    highlights: [],
    score: 1,
  };
}

const results = (query: string, ...data: ConversationSearchHit[]): ConversationSearchResults => ({
  object: "list",
  query,
  data,
});

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
  pending = [];
  search.mockReset();
  search.mockImplementation(
    (query, options) =>
      new Promise((resolve, reject) => {
        pending.push({ query, signal: options?.signal, resolve, reject });
      }),
  );
  root = document.createElement("div");
  document.body.append(root);
});

afterEach(() => {
  render(null, root);
  root.remove();
  vi.useRealTimers();
});

describe("the message search", () => {
  it("asks nothing for a query under two characters", async () => {
    await type("");
    await type(" b ");
    await flush(SEARCH_DEBOUNCE_MS * 2);
    expect(search).not.toHaveBeenCalled();
    expect(current.state.status).toBe("idle");
  });

  it("asks once the typing pauses, for the last query typed", async () => {
    await type("br");
    await flush(100);
    await type("bre");
    await flush(100);
    await type("bread ");
    expect(current.state.status).toBe("searching");
    await flush(SEARCH_DEBOUNCE_MS - 1);
    expect(search).not.toHaveBeenCalled();
    await flush(1);
    expect(search.mock.calls.map(([q]) => q)).toEqual(["bread"]);
    await act(async () => pending[0]!.resolve(results("bread", hit("conv_a", "bread"))));
    expect(current.state).toMatchObject({ status: "done", query: "bread", error: null });
    expect(current.state.hits.map((x) => x.conversation_id)).toEqual(["conv_a"]);
  });

  it("lets the latest query win: the earlier request is aborted and its late answer ignored", async () => {
    await type("bread");
    await flush(SEARCH_DEBOUNCE_MS);
    const first = pending[0]!;
    await type("lisbon");
    expect(first.signal?.aborted).toBe(true);
    expect(current.state).toMatchObject({ status: "searching", query: "lisbon", hits: [] });
    await flush(SEARCH_DEBOUNCE_MS);
    const second = pending[1]!;
    expect(second.query).toBe("lisbon");
    await act(async () => second.resolve(results("lisbon", hit("conv_l", "Lisbon"))));
    await act(async () => first.resolve(results("bread", hit("conv_b", "bread"))));
    expect(current.state.query).toBe("lisbon");
    expect(current.state.hits.map((x) => x.conversation_id)).toEqual(["conv_l"]);
  });

  it("shows none of an earlier query's hits under a new one", async () => {
    await type("bread");
    await flush(SEARCH_DEBOUNCE_MS);
    await act(async () => pending[0]!.resolve(results("bread", hit("conv_b", "bread"))));
    expect(current.state.hits).toHaveLength(1);
    await type("lisbon");
    expect(current.state).toMatchObject({ status: "searching", query: "lisbon", hits: [] });
  });

  it("says when the search failed, and keeps quiet about an aborted one", async () => {
    await type("bread");
    await flush(SEARCH_DEBOUNCE_MS);
    await act(async () => pending[0]!.reject(new ApiError("The service is unavailable right now.", { status: 503 })));
    expect(current.state).toMatchObject({ status: "error", error: "The service is unavailable right now." });

    await type("toast");
    await flush(SEARCH_DEBOUNCE_MS);
    const aborted = pending[1]!;
    await type("");
    expect(current.state.status).toBe("idle");
    await act(async () => aborted.reject(new DOMException("Aborted", "AbortError")));
    expect(current.state.status).toBe("idle");
  });

  it("asks again at once on refresh (Enter), for the same query", async () => {
    await type("bread");
    await flush(SEARCH_DEBOUNCE_MS);
    await act(async () => pending[0]!.resolve(results("bread")));
    expect(current.state).toMatchObject({ status: "done", hits: [] });
    await act(async () => current.refresh());
    expect(current.state).toMatchObject({ status: "searching", query: "bread" });
    await flush(0);
    expect(search).toHaveBeenCalledTimes(2);
    await act(async () => pending[1]!.resolve(results("bread", hit("conv_b", "bread"))));
    expect(current.state.hits).toHaveLength(1);
  });
});
