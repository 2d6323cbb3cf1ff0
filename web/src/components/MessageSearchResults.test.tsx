import { render } from "preact";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { ConversationSearchHit } from "../conversationSearch";
import type { MessageSearchState } from "../hooks/useMessageSearch";
import { MessageSearchResults } from "./MessageSearchResults";

let root: HTMLElement;
afterEach(() => {
  render(null, root);
  root.remove();
});

function mount(state: MessageSearchState, onOpen = vi.fn()) {
  root = document.createElement("div");
  document.body.append(root);
  render(<MessageSearchResults state={state} onOpen={onOpen} />, root);
  return onOpen;
}

const hostile: ConversationSearchHit = {
  object: "conversation.search_hit",
  conversation_id: "conv_1",
  title: null,
  message_id: 3,
  role: "assistant",
  created_at: 1,
  updated_at: 1,
  snippet: '<img src=x onerror="alert(1)"> 🍞 bread <b>bold</b>',
  highlights: [{ start: 33, end: 38 }],
  score: 1,
};

describe("the Messages section", () => {
  it("shows each hit's title, who wrote it and the snippet, the words in <mark>, the snippet as text", () => {
    const onOpen = mount({ status: "done", query: "bread", hits: [hostile], error: null });
    const button = root.querySelector<HTMLButtonElement>('[data-testid="message-hit"]')!;
    expect(button.tagName).toBe("BUTTON");
    expect(button.querySelector('[data-testid="message-hit-title"]')!.textContent).toBe("New chat");
    expect(button.querySelector(".hit-role")!.textContent).toBe("Assistant: ");
    expect([...button.querySelectorAll("mark")].map((m) => m.textContent)).toEqual(["bread"]);
    expect(button.querySelector("img, b")).toBeNull(); // the user's text is never HTML
    expect(button.querySelector('[data-testid="message-hit-snippet"]')!.textContent).toBe(hostile.snippet);
    expect(button.getAttribute("aria-label")).toBe(`Assistant in “New chat”: ${hostile.snippet}`);
    expect(root.querySelector('[data-testid="message-search-empty"]')).toBeNull();
    expect(root.querySelector('[role="status"]')!.textContent).toBe("1 message matches.");
    button.click();
    expect(onOpen).toHaveBeenCalledWith(hostile);
  });

  it("says when nothing matches, while it searches, and when the search failed", () => {
    mount({ status: "done", query: "zeppelin", hits: [], error: null });
    expect(root.querySelector('[data-testid="message-search-empty"]')!.textContent).toBe("No messages match.");
    render(<MessageSearchResults state={{ status: "searching", query: null, hits: [], error: null }} onOpen={vi.fn()} />, root);
    expect(root.querySelector('[data-testid="message-search-results"]')!.getAttribute("aria-busy")).toBe("true");
    expect(root.querySelector('[role="status"]')!.textContent).toBe("Searching…");
    expect(root.querySelector('[data-testid="message-search-empty"]')).toBeNull();
    render(
      <MessageSearchResults state={{ status: "error", query: "x", hits: [], error: "Network error." }} onOpen={vi.fn()} />,
      root,
    );
    expect(root.querySelector('[data-testid="message-search-error"]')!.textContent).toBe(
      "Could not search messages: Network error.",
    );
  });
});
