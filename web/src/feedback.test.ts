/** Feedback state: what a thumb click does, what a success or a failure leaves, and answers replaced at an index. */
import { describe, expect, it } from "vitest";
import { ApiError } from "./api";
import {
  emptyEntry,
  entryFor,
  failed,
  fromListing,
  given,
  hidden,
  removed,
  reopened,
  started,
  thumbAction,
  type FeedbackObject,
} from "./feedback";

function stored(index: number, rating: "up" | "down", comment: string | null = null): FeedbackObject {
  return {
    object: "conversation.message.feedback",
    conversation_id: "conv_1",
    message_index: index,
    rating,
    comment,
    created_at: 1,
    model: "mini",
  };
}

describe("feedback state", () => {
  it("a thumb gives its rating, keeping the comment; the chosen thumb removes it", () => {
    const entry = { ...emptyEntry("Madrid"), rating: "down" as const, comment: "Lisbon" };
    expect(thumbAction(entry, "up")).toEqual({ kind: "give", rating: "up", comment: "Lisbon" });
    expect(thumbAction(entry, "down")).toEqual({ kind: "remove" });
    expect(thumbAction(emptyEntry("x"), "down")).toEqual({ kind: "give", rating: "down", comment: null });
  });

  it("a stored rating opens the comment box; a sent comment closes it", () => {
    const opened = given(started(emptyEntry("Madrid")), stored(1, "down"), false);
    expect(opened).toMatchObject({ rating: "down", comment: null, draft: "", open: true, pending: false, error: null });
    const typed = { ...opened, draft: "Lisbon, not Madrid" };
    const sent = given(started(typed), stored(1, "down", "Lisbon, not Madrid"), true);
    expect(sent).toMatchObject({ rating: "down", comment: "Lisbon, not Madrid", draft: null, open: false });
    expect(removed(sent)).toMatchObject({ rating: null, comment: null, draft: null, open: false });
  });

  it("hiding the box keeps the draft; reopening shows it, else the stored comment", () => {
    const typing = { ...emptyEntry("Madrid"), rating: "down" as const, comment: "old", draft: "new words", open: true };
    const closed = hidden(typing);
    expect(closed).toMatchObject({ open: false, draft: "new words", comment: "old" });
    expect(reopened(closed)).toMatchObject({ open: true, draft: "new words" });
    expect(reopened({ ...closed, draft: null })).toMatchObject({ open: true, draft: "old" });
    expect(given(started(closed), stored(1, "up", "old"), false)).toMatchObject({ open: true, draft: "new words" });
  });

  it("a failure keeps what the server holds and the typed comment, and says why", () => {
    const held = { ...emptyEntry("Madrid"), rating: "up" as const, draft: "a long comment I typed" };
    const network = failed(started(held), new ApiError("x", { kind: "network" }));
    expect(network).toMatchObject({ rating: "up", draft: "a long comment I typed", pending: false });
    expect(network.error).toMatch(/could not be reached/);
    expect(failed(held, new ApiError("gone", { status: 404 })).error).toMatch(/no longer exists/);
    expect(failed(held, new ApiError("Invalid value for 'comment'", { status: 400 })).error).toMatch(/comment/);
  });

  it("a listing binds each rating to the answer shown at its index; another answer there starts empty", () => {
    const map = fromListing([stored(1, "up"), stored(3, "down", "why"), stored(9, "down")], new Map([[1, "A"], [3, "B"]]));
    expect(Object.keys(map)).toEqual(["1", "3"]);
    expect(entryFor(map, 3, "B")).toMatchObject({ rating: "down", comment: "why" });
    expect(entryFor(map, 3, "B, regenerated")).toEqual(emptyEntry("B, regenerated"));
  });
});
