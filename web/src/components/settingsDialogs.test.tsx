/** The memory section and the share dialog against a scripted API: what they show, what they send, and how a refusal
 * (the safety filter, personal data in a chat) keeps the user's input and asks before anything is shared. */
import { render } from "preact";
import { act } from "preact/test-utils";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { api, ApiError } from "../api";
import type { MemoryObject, ShareLink } from "../types";
import { MemorySection } from "./MemorySection";
import { ShareDialog } from "./ShareDialog";

vi.mock("../api", async (importOriginal) => {
  const actual = await importOriginal<typeof import("../api")>();
  const mocked = {
    ...actual.api,
    getMemory: vi.fn(),
    setMemoryEnabled: vi.fn(),
    addMemory: vi.fn(),
    editMemory: vi.fn(),
    deleteMemory: vi.fn(),
    createShare: vi.fn(),
    listShares: vi.fn(),
    revokeShare: vi.fn(),
  };
  return { ...actual, api: mocked };
});

const item = (id: string, text: string) => ({ id, object: "account.memory.item" as const, text, created_at: 1, updated_at: 1 });
const memory = (enabled: boolean, texts: string[]): MemoryObject => ({
  object: "account.memory",
  enabled,
  items: texts.map((text, i) => item(`mem_${i}`, text)),
  max_items: 50,
});
const link = (id: string, url: string | null = null): ShareLink => ({
  id, object: "conversation.share", conversation_id: "conv_1", title: "t", message_count: 2, created_at: 1, expires_at: 2, url,
});

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.append(root);
  vi.clearAllMocks();
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

function byTest(id: string): HTMLElement {
  const found = root.querySelector<HTMLElement>(`[data-testid="${id}"]`);
  if (!found) throw new Error(`no ${id}`);
  return found;
}

async function type(id: string, text: string) {
  const input = byTest(id) as HTMLInputElement;
  input.value = text;
  await act(async () => {
    input.dispatchEvent(new Event("input", { bubbles: true }));
  });
}

describe("memory section", () => {
  it("lists the facts, adds one and shows what the server holds after", async () => {
    vi.mocked(api.getMemory).mockResolvedValueOnce(memory(false, ["I live in Porto."])).mockResolvedValueOnce(memory(false, ["I live in Porto.", "I am vegetarian."]));
    vi.mocked(api.addMemory).mockResolvedValue(item("mem_1", "I am vegetarian."));
    await act(async () => render(<MemorySection />, root));
    await settle();
    expect([...root.querySelectorAll(".memory-text")].map((e) => e.textContent)).toEqual(["I live in Porto."]);
    expect((byTest("memory-enabled") as HTMLInputElement).checked).toBe(false);
    await type("memory-new", "I am vegetarian.");
    await act(async () => {
      byTest("memory-add").closest("form")!.dispatchEvent(new Event("submit", { cancelable: true }));
    });
    await settle();
    expect(api.addMemory).toHaveBeenCalledWith("I am vegetarian.");
    expect(root.querySelectorAll(".memory-text")).toHaveLength(2);
    expect((byTest("memory-new") as HTMLInputElement).value).toBe("");
  });

  it("keeps a refused fact in the box with the reason", async () => {
    vi.mocked(api.getMemory).mockResolvedValue(memory(true, []));
    vi.mocked(api.addMemory).mockRejectedValue(new ApiError("This request was blocked by the content policy.", { status: 400, code: "content_policy_violation" }));
    await act(async () => render(<MemorySection />, root));
    await settle();
    await type("memory-new", "something refused");
    await act(async () => {
      byTest("memory-add").closest("form")!.dispatchEvent(new Event("submit", { cancelable: true }));
    });
    await settle();
    expect(byTest("memory-error").textContent).toContain("content policy");
    expect((byTest("memory-new") as HTMLInputElement).value).toBe("something refused");
  });

  it("switching it on shows at once and is put back if the save fails", async () => {
    vi.mocked(api.getMemory).mockResolvedValue(memory(false, []));
    vi.mocked(api.setMemoryEnabled).mockRejectedValue(new ApiError("Storage is unavailable right now.", { status: 503 }));
    await act(async () => render(<MemorySection />, root));
    await settle();
    const toggle = byTest("memory-enabled") as HTMLInputElement;
    toggle.checked = true;
    await act(async () => {
      toggle.dispatchEvent(new Event("change", { bubbles: true }));
    });
    await settle();
    expect(api.setMemoryEnabled).toHaveBeenCalledWith(true);
    expect((byTest("memory-enabled") as HTMLInputElement).checked).toBe(false);
    expect(byTest("memory-error").textContent).toContain("unavailable");
  });
});

describe("share dialog", () => {
  it("names personal data and shares only after Share anyway", async () => {
    vi.mocked(api.listShares).mockResolvedValueOnce({ data: [] }).mockResolvedValueOnce({ data: [link("shr_1")] });
    vi.mocked(api.createShare)
      .mockRejectedValueOnce(
        new ApiError("The conversation holds personal data (email in message 1). Send acknowledge_pii: true to share it anyway.", {
          status: 400,
          code: "pii_in_share",
        }),
      )
      .mockResolvedValueOnce(link("shr_1", "/s/abcdefghijklmnopqrstuvwxyz012345"));
    await act(async () => render(<ShareDialog conversationId="conv_1" onClose={() => {}} />, root));
    await settle();
    await act(async () => byTest("share-create").click());
    await settle();
    expect(api.createShare).toHaveBeenLastCalledWith("conv_1", 30, false);
    expect(byTest("share-pii").textContent).toContain("email in message 1");
    expect(byTest("share-pii").textContent).not.toContain("acknowledge_pii");
    expect(root.querySelector('[data-testid="share-url"]')).toBeNull();
    await act(async () => byTest("share-anyway").click());
    await settle();
    expect(api.createShare).toHaveBeenLastCalledWith("conv_1", 30, true);
    expect((byTest("share-url") as HTMLInputElement).value).toBe(`${window.location.origin}/s/abcdefghijklmnopqrstuvwxyz012345`);
    expect(root.querySelectorAll('[data-testid="share-link"]')).toHaveLength(1);
  });

  it("revokes a link and lists what is left", async () => {
    vi.mocked(api.listShares).mockResolvedValueOnce({ data: [link("shr_1")] }).mockResolvedValueOnce({ data: [] });
    vi.mocked(api.revokeShare).mockResolvedValue({ id: "shr_1", deleted: true });
    await act(async () => render(<ShareDialog conversationId="conv_1" onClose={() => {}} />, root));
    await settle();
    await act(async () => byTest("share-revoke").click());
    await settle();
    expect(api.revokeShare).toHaveBeenCalledWith("shr_1");
    expect(root.querySelectorAll('[data-testid="share-link"]')).toHaveLength(0);
  });
});
