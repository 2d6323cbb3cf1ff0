import { render } from "preact";
import { afterEach, describe, expect, it } from "vitest";
import { AssistantMessage } from "./Message";

let root: HTMLElement;
afterEach(() => {
  render(null, root);
  root.remove();
});

function mount(): HTMLElement {
  root = document.createElement("div");
  document.body.append(root);
  return root;
}

describe("a reasoning model's reasoning", () => {
  it("is shown collapsed above the answer, and opens on demand", () => {
    const message = {
      key: "a1",
      role: "assistant" as const,
      content: "Lisbon.",
      reasoning: "Porto is on the Douro; Lisbon is the capital.",
      status: "done" as const,
    };
    render(<AssistantMessage message={message} canRegenerate={false} onRegenerate={() => {}} />, mount());
    const details = root.querySelector<HTMLDetailsElement>('[data-testid="reasoning"]')!;
    expect(details.open).toBe(false);
    expect(details.querySelector("summary")!.textContent).toBe("Reasoning");
    expect(details.textContent).toContain("Lisbon is the capital");
    const main = root.querySelector(".message-main")!;
    expect(main.firstElementChild).toBe(details); // above the answer's text
    expect(main.textContent).toContain("Lisbon.");
  });

  it("is not shown for an answer without reasoning", () => {
    const message = { key: "a2", role: "assistant" as const, content: "Hi.", status: "done" as const };
    render(<AssistantMessage message={message} canRegenerate={false} onRegenerate={() => {}} />, mount());
    expect(root.querySelector('[data-testid="reasoning"]')).toBeNull();
  });
});
