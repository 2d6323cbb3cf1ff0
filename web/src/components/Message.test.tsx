import { render } from "preact";
import { useState } from "preact/hooks";
import { act } from "preact/test-utils";
import { afterEach, describe, expect, it, vi } from "vitest";
import { AssistantMessage, BranchSwitch, UserMessage, type VersionControl } from "./Message";

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

describe("the versions control (‹ k / n ›)", () => {
  const control = (over: Partial<VersionControl> = {}): VersionControl => ({
    position: 2,
    count: 3,
    disabled: false,
    onSelect: vi.fn(() => true),
    ...over,
  });
  const q = (id: string) => root.querySelector<HTMLButtonElement>(`[data-testid="${id}"]`)!;

  it("is a labelled group of two buttons around k / n, disabled at the ends and while streaming", () => {
    const versions = control();
    render(<BranchSwitch {...versions} />, mount());
    const group = root.querySelector('[role="group"]')!;
    expect(group.getAttribute("aria-label")).toBe("Message versions");
    expect(q("branch-position").textContent).toBe("2 / 3");
    expect(group.textContent).toContain("Version 2 of 3"); // what a screen reader reads
    expect(q("branch-prev").getAttribute("aria-label")).toBe("Previous version");
    expect(q("branch-next").getAttribute("aria-label")).toBe("Next version");
    expect([q("branch-prev").disabled, q("branch-next").disabled]).toEqual([false, false]);
    q("branch-prev").click();
    q("branch-next").click();
    expect(versions.onSelect).toHaveBeenNthCalledWith(1, -1);
    expect(versions.onSelect).toHaveBeenNthCalledWith(2, 1);

    render(<BranchSwitch {...control({ position: 1, count: 2 })} />, root);
    expect([q("branch-prev").disabled, q("branch-next").disabled]).toEqual([true, false]);
    render(<BranchSwitch {...control({ position: 2, count: 2 })} />, root);
    expect([q("branch-prev").disabled, q("branch-next").disabled]).toEqual([false, true]);
    render(<BranchSwitch {...control({ disabled: true })} />, root);
    expect([q("branch-prev").disabled, q("branch-next").disabled]).toEqual([true, true]);
  });

  it("keeps the focus in the control as it switches: on the button pressed, else (at an end) on the other", () => {
    function Switching() {
      const [position, setPosition] = useState(2);
      return (
        <BranchSwitch
          position={position}
          count={3}
          disabled={false}
          onSelect={(delta) => {
            setPosition((p) => p + delta);
            return true;
          }}
        />
      );
    }
    render(<Switching />, mount());
    q("branch-prev").focus();
    act(() => q("branch-prev").click());
    expect(q("branch-position").textContent).toBe("1 / 3");
    expect(q("branch-prev").disabled).toBe(true);
    expect(document.activeElement).toBe(q("branch-next"));
    act(() => q("branch-next").click());
    expect(q("branch-position").textContent).toBe("2 / 3");
    expect(document.activeElement).toBe(q("branch-next"));
  });

  it("is shown on a user message outside its hover-only actions, and on an answer while another streams", () => {
    const user = { key: "u1", role: "user" as const, content: "hi", nodeId: 3 };
    const noop = () => {};
    render(
      <UserMessage
        message={user}
        versions={control({ position: 1, count: 2 })}
        canEdit
        editDraft={null}
        onEditStart={noop}
        onEditChange={noop}
        onEditSave={noop}
        onEditCancel={noop}
      />,
      mount(),
    );
    const group = root.querySelector('[role="group"]')!;
    expect(group.closest(".message-actions")).toBeNull();
    expect(root.querySelector('[data-testid="edit"]')).not.toBeNull();

    const answer = { key: "a1", role: "assistant" as const, content: "hello", status: "done" as const };
    render(<AssistantMessage message={answer} versions={control({ disabled: true })} canRegenerate={false} onRegenerate={noop} />, root);
    expect(q("branch-position").textContent).toBe("2 / 3");
    expect(q("branch-next").disabled).toBe(true);
    render(<AssistantMessage message={answer} canRegenerate={false} onRegenerate={noop} />, root);
    expect(root.querySelector('[role="group"]')).toBeNull(); // one version: no control
  });
});
