/** The thumbs and the comment box against a scripted feedback API: load, rate, comment, fail, remove, regenerate. */
import { render } from "preact";
import { act } from "preact/test-utils";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../api";
import { feedbackApi, type FeedbackObject, type Rating } from "../feedback";
import { useFeedback } from "../hooks/useFeedback";
import { FeedbackBar } from "./FeedbackBar";

vi.mock("../feedback", async (importOriginal) => {
  const actual = await importOriginal<typeof import("../feedback")>();
  return { ...actual, feedbackApi: { list: vi.fn(), give: vi.fn(), remove: vi.fn() } };
});
const list = vi.mocked(feedbackApi.list);
const give = vi.mocked(feedbackApi.give);
const remove = vi.mocked(feedbackApi.remove);

function stored(index: number, rating: Rating, comment: string | null = null): FeedbackObject {
  return { object: "conversation.message.feedback", conversation_id: "conv_1", message_index: index, rating, comment, created_at: 1, model: null };
}

function Answers({ answers }: { answers: [number, string][] }) {
  const feedback = useFeedback("conv_1", new Map(answers));
  return (
    <div>
      {answers.map(([index, text]) => (
        <section key={index} data-index={index}>
          <FeedbackBar index={index} answer={text} feedback={feedback} />
        </section>
      ))}
    </div>
  );
}

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.append(root);
  list.mockReset().mockResolvedValue([]);
  give.mockReset();
  remove.mockReset();
});
afterEach(() => {
  render(null, root);
  root.remove();
});

async function settle() {
  await act(async () => {
    await new Promise((resolve) => setTimeout(resolve, 0));
  });
}

async function show(answers: [number, string][]) {
  await act(async () => {
    render(<Answers answers={answers} />, root);
  });
  await settle();
}

const at = (index: number) => root.querySelector(`section[data-index="${index}"]`)!;
const q = <T extends Element>(index: number, id: string) => at(index).querySelector<T>(`[data-testid="${id}"]`);

async function click(index: number, id: string) {
  await act(async () => {
    q<HTMLButtonElement>(index, id)!.click();
  });
  await settle();
}

async function type(index: number, text: string) {
  const box = q<HTMLTextAreaElement>(index, "feedback-comment")!;
  await act(async () => {
    box.value = text;
    box.dispatchEvent(new Event("input", { bubbles: true }));
  });
}

describe("feedback on stored answers", () => {
  it("shows the stored ratings when the conversation opens", async () => {
    list.mockResolvedValue([stored(3, "down", "too long")]);
    await show([[1, "first"], [3, "second"]]);
    expect(list).toHaveBeenCalledWith("conv_1");
    expect(q(1, "feedback")!.getAttribute("data-rating")).toBe("none");
    expect(q(3, "feedback")!.getAttribute("data-rating")).toBe("down");
    expect(q(3, "feedback-down")!.getAttribute("aria-pressed")).toBe("true");
    expect(q(3, "feedback-up")!.getAttribute("aria-pressed")).toBe("false");
    expect(q(3, "feedback-comment-saved")).not.toBeNull();
  });

  it("thumbs down, then a comment: both sent, the choice stays visible", async () => {
    await show([[1, "Madrid"]]);
    give.mockResolvedValueOnce(stored(1, "down"));
    await click(1, "feedback-down");
    expect(give).toHaveBeenLastCalledWith("conv_1", 1, "down", null);
    expect(q(1, "feedback-down")!.getAttribute("aria-pressed")).toBe("true");
    expect(q(1, "feedback-comment")).not.toBeNull(); // the optional comment box opened
    await type(1, "The capital is Lisbon");
    give.mockResolvedValueOnce(stored(1, "down", "The capital is Lisbon"));
    await click(1, "feedback-send");
    expect(give).toHaveBeenLastCalledWith("conv_1", 1, "down", "The capital is Lisbon");
    expect(q(1, "feedback-comment")).toBeNull();
    expect(q(1, "feedback-comment-saved")).not.toBeNull();
    expect(q(1, "feedback")!.getAttribute("data-rating")).toBe("down");
  });

  it("a failed send shows the error and keeps the rating and the typed comment", async () => {
    await show([[1, "Madrid"]]);
    give.mockResolvedValueOnce(stored(1, "down"));
    await click(1, "feedback-down");
    await type(1, "A comment worth keeping");
    give.mockRejectedValueOnce(new ApiError("Network error", { kind: "network" }));
    await click(1, "feedback-send");
    const error = q(1, "feedback-error")!;
    expect(error.getAttribute("role")).toBe("alert");
    expect(error.textContent).toMatch(/could not be reached/);
    expect(q<HTMLTextAreaElement>(1, "feedback-comment")!.value).toBe("A comment worth keeping");
    expect(q(1, "feedback-down")!.getAttribute("aria-pressed")).toBe("true");
    // Sent again once the service is back: the error goes, the comment is saved.
    give.mockResolvedValueOnce(stored(1, "down", "A comment worth keeping"));
    await click(1, "feedback-send");
    expect(give).toHaveBeenLastCalledWith("conv_1", 1, "down", "A comment worth keeping");
    expect(q(1, "feedback-error")).toBeNull();
  });

  it("a failed rating leaves the thumbs as the server has them", async () => {
    await show([[1, "Madrid"]]);
    give.mockRejectedValueOnce(new ApiError("Conversation gone", { status: 404 }));
    await click(1, "feedback-up");
    expect(q(1, "feedback-up")!.getAttribute("aria-pressed")).toBe("false");
    expect(q(1, "feedback-error")!.textContent).toMatch(/no longer exists/);
  });

  it("clicking the chosen thumb removes the rating", async () => {
    list.mockResolvedValue([stored(1, "up")]);
    await show([[1, "Madrid"]]);
    remove.mockResolvedValueOnce(undefined);
    await click(1, "feedback-up");
    expect(remove).toHaveBeenCalledWith("conv_1", 1);
    expect(q(1, "feedback")!.getAttribute("data-rating")).toBe("none");
  });

  it("a pending call keeps the focus on the thumb (aria-disabled, not disabled) and the label stays put", async () => {
    await show([[1, "Madrid"]]);
    let answer: (value: FeedbackObject) => void = () => {};
    give.mockReturnValueOnce(new Promise((resolve) => (answer = resolve)));
    const down = q<HTMLButtonElement>(1, "feedback-down")!;
    const label = down.getAttribute("aria-label");
    down.focus();
    await click(1, "feedback-down");
    expect(down.disabled).toBe(false);
    expect(down.getAttribute("aria-disabled")).toBe("true");
    expect(document.activeElement).toBe(down);
    await click(1, "feedback-up"); // ignored while pending
    expect(give).toHaveBeenCalledTimes(1);
    await act(async () => answer(stored(1, "down")));
    await settle();
    expect(down.getAttribute("aria-pressed")).toBe("true");
    expect(down.getAttribute("aria-label")).toBe(label); // state is aria-pressed's job
    expect(document.activeElement).toBe(q(1, "feedback-comment")); // the opened box takes the focus
  });

  it("Close and Escape hide the box but keep the draft; Add comment brings it back", async () => {
    await show([[1, "Madrid"]]);
    give.mockResolvedValueOnce(stored(1, "up"));
    await click(1, "feedback-up");
    await type(1, "Half a thought");
    await click(1, "feedback-close");
    expect(q(1, "feedback-comment")).toBeNull();
    expect(document.activeElement).toBe(q(1, "feedback-comment-add")); // the focus is not dropped
    await click(1, "feedback-comment-add");
    const box = q<HTMLTextAreaElement>(1, "feedback-comment")!;
    expect(box.value).toBe("Half a thought");
    expect(document.activeElement).toBe(box);
    await act(async () => {
      box.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
    });
    expect(q(1, "feedback-comment")).toBeNull();
    await click(1, "feedback-comment-add");
    expect(q<HTMLTextAreaElement>(1, "feedback-comment")!.value).toBe("Half a thought");
    expect(give).toHaveBeenCalledTimes(1); // nothing was sent by closing
  });

  it("a rating loaded without a comment offers to add one later", async () => {
    list.mockResolvedValue([stored(1, "down")]);
    await show([[1, "Madrid"], [3, "Lisbon"]]);
    expect(q(3, "feedback-comment-add")).toBeNull(); // unrated: nothing to comment on yet
    await click(1, "feedback-comment-add");
    await type(1, "Lisbon is the capital");
    give.mockResolvedValueOnce(stored(1, "down", "Lisbon is the capital"));
    await click(1, "feedback-send");
    expect(give).toHaveBeenLastCalledWith("conv_1", 1, "down", "Lisbon is the capital");
    expect(q(1, "feedback-comment-add")).toBeNull();
    expect(document.activeElement).toBe(q(1, "feedback-comment-saved"));
  });

  it("a regenerated answer at the same index starts without the old rating", async () => {
    list.mockResolvedValue([stored(1, "down")]);
    await show([[1, "Madrid"]]);
    expect(q(1, "feedback")!.getAttribute("data-rating")).toBe("down");
    await show([[1, "Lisbon"]]);
    expect(q(1, "feedback")!.getAttribute("data-rating")).toBe("none");
  });
});
