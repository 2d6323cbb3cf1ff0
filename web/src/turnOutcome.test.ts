import { describe, expect, it } from "vitest";
import { ApiError } from "./api";
import { turnOutcome, type StreamEnd } from "./turnOutcome";

const clean: StreamEnd = { aborted: false, streamError: null, ended: "done", finish: "stop", stored: true };

describe("turnOutcome", () => {
  it("a finished, saved answer is done", () => {
    expect(turnOutcome(clean)).toMatchObject({ status: "done", view: null, savedTurn: true, unknown: false });
  });
  it("a halt is filtered", () => {
    expect(turnOutcome({ ...clean, finish: "content_filter" }).status).toBe("filtered");
  });
  it("a Stop the server said nothing about may still be saved", () => {
    const outcome = turnOutcome({ ...clean, aborted: true, ended: null, finish: null, stored: null });
    expect(outcome).toMatchObject({ status: "stopped", savedTurn: false, notSaved: false, unknown: true });
  });
  it("a lost connection is an error with a view", () => {
    const outcome = turnOutcome({ ...clean, ended: "disconnected", stored: null });
    expect(outcome.status).toBe("error");
    expect(outcome.view).not.toBeNull();
    expect(outcome.unknown).toBe(true);
  });
  it("an in-band error names it, and an unsaved turn says so", () => {
    const outcome = turnOutcome({ ...clean, streamError: new ApiError("boom", { status: 502 }), stored: false });
    expect(outcome).toMatchObject({ status: "error", notSaved: true });
    expect(outcome.liveStatus.startsWith("Error")).toBe(true);
  });
});
