import { describe, expect, it } from "vitest";
import { chatModels } from "./types";

describe("chatModels", () => {
  it("keeps the chat models of /v1/models and drops embedding models and the guard", () => {
    const listed = [
      { id: "mini", capabilities: { chat_completions: true } },
      { id: "text-embedding-minilm", capabilities: { chat_completions: false } },
      { id: "fleetchat-embedded", capabilities: { chat_completions: false } },
      { id: "flagship" }, // an older gateway: no capabilities, chat models only
    ];
    expect(chatModels(listed)).toEqual(["mini", "flagship"]);
  });
});
