import { afterEach, describe, expect, it, vi } from "vitest";
import { api, ApiError, setUnauthorizedHandler } from "./api";
import { filesApi } from "./filesApi";

type Call = { url: string; init: RequestInit };

function mockFetch(status = 200, body: unknown = {}): Call[] {
  const calls: Call[] = [];
  vi.stubGlobal("fetch", async (url: string, init: RequestInit) => {
    calls.push({ url, init });
    return new Response(status === 204 ? null : JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
  });
  return calls;
}

afterEach(() => {
  vi.unstubAllGlobals();
  setUnauthorizedHandler(null);
});

describe("api", () => {
  it("sends the CSRF header on every state-changing request, same-origin relative URLs", async () => {
    const calls = mockFetch(200, { id: "conv_1", deleted: true });
    await api.renameConversation("conv_1", "New title");
    await api.deleteConversation("conv_1");
    await api.signIn("sk-x");
    for (const call of calls) {
      expect(call.url.startsWith("/v1/")).toBe(true);
      expect((call.init.headers as Record<string, string>)["X-Requested-With"]).toBe("fleetchat");
      expect(call.init.credentials).toBe("same-origin");
    }
    expect(calls.map((c) => c.init.method)).toEqual(["PATCH", "DELETE", "POST"]);
    expect(JSON.parse(calls[0]!.init.body as string)).toEqual({ title: "New title" });
  });

  it("switching the shown branch PATCHes current_node and reads back the leaf the server resolved", async () => {
    const calls = mockFetch(200, { id: "conv_1", current_node: 7 });
    const saved = await api.setCurrentNode("conv_1", 3);
    expect(calls[0]!.url).toBe("/v1/conversations/conv_1");
    expect(calls[0]!.init.method).toBe("PATCH");
    expect(JSON.parse(calls[0]!.init.body as string)).toEqual({ current_node: 3 });
    expect(saved.current_node).toBe(7);
  });

  it("GETs carry no CSRF header; list paging passes the cursor", async () => {
    const calls = mockFetch(200, { data: [], has_more: false, next_cursor: null });
    await api.listConversations("abc=");
    expect(calls[0]!.url).toBe("/v1/conversations?limit=20&after=abc%3D");
    expect((calls[0]!.init.headers as Record<string, string>)["X-Requested-With"]).toBeUndefined();
  });

  it("a 401 on a signed-in call tells the app (session expired); sign-in's own 401 does not", async () => {
    mockFetch(401, { error: { message: "expired", type: "authentication_error", param: null, code: null } });
    const seen: ApiError[] = [];
    setUnauthorizedHandler((e) => seen.push(e));
    await expect(api.usage()).rejects.toMatchObject({ status: 401 });
    await expect(api.signIn("bad")).rejects.toMatchObject({ status: 401, message: "expired" });
    expect(seen).toHaveLength(1);
  });

  it("a fetch that throws is a network error", async () => {
    vi.stubGlobal("fetch", async () => {
      throw new TypeError("Failed to fetch");
    });
    await expect(api.models()).rejects.toMatchObject({ kind: "network" });
  });

  it("sign-out handles 204", async () => {
    mockFetch(204);
    await expect(api.signOut()).resolves.toBeUndefined();
  });

  it("uploads a file as multipart (purpose assistants) with the CSRF header; a 413 is the API's message", async () => {
    const calls = mockFetch(200, { id: "file-1", object: "file", bytes: 5, created_at: 1, filename: "a.md", purpose: "assistants" });
    await filesApi.upload(new Blob(["hello"]), "a.md");
    const init = calls[0]!.init;
    expect(calls[0]!.url).toBe("/v1/files");
    expect(init.method).toBe("POST");
    const headers = init.headers as Record<string, string>;
    expect(headers["X-Requested-With"]).toBe("fleetchat");
    expect(headers["Content-Type"]).toBeUndefined(); // the browser sets multipart/form-data with its boundary
    const form = init.body as FormData;
    expect(form.get("purpose")).toBe("assistants");
    expect((form.get("file") as File).name).toBe("a.md");

    const message = "The file is 40 bytes; your tier accepts files of at most 10 bytes.";
    mockFetch(413, { error: { message, type: "invalid_request_error", param: "file", code: "file_too_large" } });
    await expect(filesApi.upload(new Blob(["x".repeat(40)]), "big.txt")).rejects.toMatchObject({
      status: 413,
      message,
      code: "file_too_large",
    });
  });
});
