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

describe("the code interpreter's runs", () => {
  it("shows a run's code, output and files above the answer, and nothing unsafe from its output", () => {
    const run = {
      tool_call_id: "c1",
      tool: "python",
      status: "ok",
      arguments: JSON.stringify({ code: "print('<img src=x onerror=alert(1)>')" }),
      duration_ms: 320,
      result: { exit_code: 0, output: "<img src=x onerror=alert(1)>\n" },
      files: [{ file_id: "file-1", filename: "out.md", bytes: 2048 }],
    };
    const message = { key: "a3", role: "assistant" as const, content: "Done.", status: "done" as const, toolRuns: [run] };
    render(<AssistantMessage message={message} canRegenerate={false} onRegenerate={() => {}} />, mount());
    const shown = root.querySelector('[data-testid="tool-run"]')!;
    expect(root.querySelector(".message-main")!.firstElementChild).toBe(root.querySelector('[data-testid="tool-runs"]'));
    expect(shown.querySelector('[data-testid="tool-run-label"]')!.textContent).toBe("Ran in 320 ms");
    expect(shown.querySelector('[data-testid="tool-run-code"]')!.textContent).toContain("print(");
    expect(shown.querySelector('[data-testid="tool-run-output"] pre')!.textContent).toBe("<img src=x onerror=alert(1)>\n");
    expect(shown.querySelector("img")).toBeNull(); // output and code are text, never markup
    const link = shown.querySelector<HTMLAnchorElement>('[data-testid="tool-run-file"]')!;
    expect(link.getAttribute("href")).toBe("/v1/files/file-1/content");
    expect(link.getAttribute("download")).toBe("out.md");
  });

  it("says a run is running, and that one timed out", () => {
    const running = { tool_call_id: "c1", tool: "python", status: "running", arguments: '{"code":"while True: pass"}' };
    const timedOut = { ...running, tool_call_id: "c2", status: "timeout", duration_ms: 5010, result: { error: "killed at the time limit (5 s)" } };
    const message = { key: "a4", role: "assistant" as const, content: "", status: "streaming" as const, toolRuns: [running, timedOut] };
    render(<AssistantMessage message={message} canRegenerate={false} onRegenerate={() => {}} />, mount());
    const [first, second] = Array.from(root.querySelectorAll('[data-testid="tool-run"]')) as [Element, Element];
    expect(first.querySelector('[data-testid="tool-run-label"]')!.textContent).toBe("Running…");
    expect(first.querySelector('[data-testid="tool-run-output"]')).toBeNull();
    expect(second.querySelector('[data-testid="tool-run-label"]')!.textContent).toBe("Timed out after 5.0 s");
    expect(second.textContent).toContain("killed at the time limit (5 s)");
  });
});
