import { render } from "preact";
import { afterEach, describe, expect, it } from "vitest";
import { ConversationItem } from "./ConversationItem";
import { UserMessage } from "./Message";

/** Long enough for any deferred effect (Preact runs them after the next frame, or after 100 ms without one). */
const afterDeferredEffects = () => new Promise((resolve) => setTimeout(resolve, 250));
const noop = () => {};

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

describe("an inline editor takes the keyboard as it appears, not a moment later", () => {
  it("edit message: text selected right away to be replaced stays selected", async () => {
    const text = "Write a detailed guide to growing tomatoes in a small garden.";
    render(
      <UserMessage
        message={{ key: "m1", role: "user", content: text }}
        canEdit
        editDraft={text}
        onEditStart={noop}
        onEditChange={noop}
        onEditSave={noop}
        onEditCancel={noop}
      />,
      mount(),
    );
    const area = root.querySelector<HTMLTextAreaElement>('[data-testid="edit-input"]')!;
    // Focused with the caret at the end as soon as it is on screen ...
    expect(document.activeElement).toBe(area);
    expect([area.selectionStart, area.selectionEnd]).toEqual([text.length, text.length]);
    // ... and nothing moves the caret afterwards: select-all then type (what Playwright's fill does) replaces the text.
    area.select();
    await afterDeferredEffects();
    expect([area.selectionStart, area.selectionEnd]).toEqual([0, text.length]);
  });

  it("rename: the title is selected by the time the input can be typed in", async () => {
    const conversation = { id: "c1", title: "Tomatoes", created_at: 0, updated_at: 0, version: 1, message_count: 2 };
    render(
      <ConversationItem
        conversation={conversation}
        active={false}
        onSelect={noop}
        onRename={async () => {}}
        onDelete={noop}
      />,
      mount(),
    );
    root.querySelector<HTMLButtonElement>('[data-testid="rename"]')!.click();
    await Promise.resolve(); // Preact re-renders on a microtask.
    const input = root.querySelector<HTMLInputElement>('[data-testid="rename-input"]')!;
    expect(input).not.toBeNull();
    expect(document.activeElement).toBe(input);
    expect([input.selectionStart, input.selectionEnd]).toEqual([0, "Tomatoes".length]);
    // Keys typed at once: the caret after them stays where typing left it.
    input.setSelectionRange(8, 8);
    await afterDeferredEffects();
    expect([input.selectionStart, input.selectionEnd]).toEqual([8, 8]);
  });
});
