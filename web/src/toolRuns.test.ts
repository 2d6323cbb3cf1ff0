import { describe, expect, it } from "vitest";
import { fenced, runCode, runLabel, runOutput, unfinished, upsertRun } from "./toolRuns";
import type { ServerToolRun } from "./types";

const started: ServerToolRun = { tool_call_id: "c1", tool: "python", status: "running", arguments: '{"code": "print(1)"}' };

describe("upsertRun", () => {
  it("replaces a call's starting view with its ending one and appends new calls", () => {
    const ended = { ...started, status: "ok", duration_ms: 120, result: { exit_code: 0, output: "1\n" } };
    const second = { ...started, tool_call_id: "c2" };
    expect(upsertRun(upsertRun(upsertRun(undefined, started), second), ended)).toEqual([ended, second]);
  });
});

describe("what a person reads of a run", () => {
  it("shows the program, not its JSON", () => {
    expect(runCode(started)).toBe("print(1)");
    expect(runCode({ ...started, tool: "calculator", arguments: '{"expression": "6*7"}' })).toBe("6*7");
    expect(runCode({ ...started, arguments: "not json" })).toBe("not json");
    expect(runCode({ ...started, arguments: "" })).toBe("");
  });

  it("labels each state, a timeout included", () => {
    expect(runLabel(started)).toBe("Running…");
    expect(runLabel({ ...started, status: "ok", duration_ms: 250 })).toBe("Ran in 250 ms");
    expect(runLabel({ ...started, status: "timeout", duration_ms: 5012 })).toBe("Timed out after 5.0 s");
    expect(runLabel({ ...started, status: "error", result: { exit_code: 1 } })).toBe("Failed (exit 1)");
    expect(unfinished([started]).map(runLabel)).toEqual(["Did not finish"]);
  });

  it("reads the output or the value", () => {
    expect(runOutput({ ...started, status: "ok", result: { output: "hi\n" } })).toBe("hi\n");
    expect(runOutput({ ...started, tool: "calculator", status: "ok", result: { value: 42 } })).toBe("42");
    expect(runOutput(started)).toBe("");
  });
});

describe("fenced", () => {
  it("fences code with more backticks than it holds", () => {
    expect(fenced("print(1)", "python")).toBe("```python\nprint(1)\n```");
    expect(fenced("s = '````'", "python")).toBe("`````python\ns = '````'\n`````");
  });
});
