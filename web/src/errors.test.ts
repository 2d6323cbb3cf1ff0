import { describe, expect, it } from "vitest";
import { ApiError, errorFromResponse, parseRetryAfter } from "./api";
import { describeError } from "./errors";

function response(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
}

describe("errors a person can act on", () => {
  it("429 with retry-after: countdown and retry", async () => {
    const err = await errorFromResponse(
      response(429, { error: { message: "Slow down", type: "requests", param: null, code: "rate_limit_exceeded" } }, { "retry-after": "7" }),
    );
    expect(err).toMatchObject({ status: 429, retryAfter: 7, shouldRetry: true, code: "rate_limit_exceeded", message: "Slow down" });
    const view = describeError(err);
    expect(view.countdown).toBe(7);
    expect(view.countdownLabel.replace("{n}", "7")).toBe("Rate limited — retry in 7 s");
    expect(view.canRetry).toBe(true);
  });

  it("429 hard quota (x-should-retry: false): the message, no countdown, no retry", async () => {
    const err = await errorFromResponse(
      response(429, { error: { message: "40 messages per 3 h", type: "insufficient_quota", param: null, code: "insufficient_quota" } }, {
        "retry-after": "60",
        "x-should-retry": "false",
      }),
    );
    const view = describeError(err);
    expect(view.countdown).toBeNull();
    expect(view.canRetry).toBe(false);
    expect(view.detail).toBe("40 messages per 3 h");
  });

  it("content policy", () => {
    const view = describeError(new ApiError("flagged", { status: 400, code: "content_policy_violation" }));
    expect(view.title).toBe("This request was blocked by the content policy");
    expect(view.detail).toBe("flagged");
  });

  it("503 counts down too; network errors offer a retry", () => {
    expect(describeError(new ApiError("busy", { status: 503, retryAfter: 2 })).countdown).toBe(2);
    const net = describeError(new ApiError("x", { kind: "network" }));
    expect(net.title).toBe("Network error");
    expect(net.canRetry).toBe(true);
  });

  it("a body that is not an error object still gives a message", async () => {
    const err = await errorFromResponse(new Response("<html>bad gateway</html>", { status: 502 }));
    expect(err.status).toBe(502);
    expect(err.message).toMatch(/502/);
  });

  it("parses retry-after seconds and dates", () => {
    expect(parseRetryAfter("3")).toBe(3);
    expect(parseRetryAfter("1.2")).toBe(2);
    expect(parseRetryAfter(null)).toBeNull();
    expect(parseRetryAfter(new Date(10_000 + 5_000).toUTCString(), 10_000)).toBe(5);
  });
});
