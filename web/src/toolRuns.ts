/** The code interpreter's runs in a chat answer: merging a run's streamed views, and what a person reads of one. */
import type { ServerToolRun } from "./types";

/** The runs with `run` in its place: a call's ending view replaces its starting one; a new call goes last. */
export function upsertRun(runs: readonly ServerToolRun[] | undefined, run: ServerToolRun): ServerToolRun[] {
  const list = runs ? [...runs] : [];
  const at = list.findIndex((r) => r.tool_call_id === run.tool_call_id);
  if (at >= 0) list[at] = run;
  else list.push(run);
  return list;
}

/** The runs with any still `running` marked as never finished (its stream ended first). */
export function unfinished(runs: readonly ServerToolRun[]): ServerToolRun[] {
  return runs.map((run) => (run.status === "running" ? { ...run, status: "unfinished" } : run));
}

/** The code a run ran: the python tool's program, the calculator's expression, else the arguments as written. */
export function runCode(run: ServerToolRun): string {
  const text = run.arguments ?? "";
  if (!text) return "";
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed && typeof parsed === "object") {
      const fields = parsed as Record<string, unknown>;
      for (const key of ["code", "expression"]) {
        if (typeof fields[key] === "string") return fields[key] as string;
      }
    }
  } catch {
    /* arguments that are not JSON: shown as written */
  }
  return text;
}

/** What the run printed or returned, as text (the python tool's output, the calculator's value). */
export function runOutput(run: ServerToolRun): string {
  const result = run.result ?? {};
  if (typeof result.output === "string") return result.output;
  if (result.value !== undefined && result.value !== null) return String(result.value);
  return "";
}

function seconds(ms: number | null | undefined): string {
  if (ms == null) return "";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** The run's state in a few words: "Running…", "Ran in 0.3 s", "Timed out after 5.0 s", "Failed (exit 1)". */
export function runLabel(run: ServerToolRun): string {
  const result = run.result ?? {};
  const took = seconds(run.duration_ms);
  switch (run.status) {
    case "running":
      return "Running…";
    case "ok":
      return took ? `Ran in ${took}` : "Ran";
    case "timeout":
      return took ? `Timed out after ${took}` : "Timed out";
    case "error":
      return typeof result.exit_code === "number" ? `Failed (exit ${result.exit_code})` : "Failed";
    case "quota":
      return "Not run: the code runs for now are used up";
    case "busy":
      return "Not run: every sandbox was busy";
    case "breaker_open":
      return "Not run: the code tool is paused";
    case "unfinished":
      return "Did not finish";
    default:
      return run.status;
  }
}

/** The error a run reported (a timeout's "killed at the time limit", a refusal's reason), if any. */
export function runError(run: ServerToolRun): string {
  const error = run.result?.error;
  return typeof error === "string" ? error : "";
}

/** The title of a run's block: "Python", "Calculator". */
export function toolTitle(tool: string): string {
  if (tool === "python") return "Python";
  if (tool === "calculator") return "Calculator";
  return tool;
}

/** A file's download address (same origin: the session cookie authorizes it). */
export function fileUrl(fileId: string): string {
  return `/v1/files/${encodeURIComponent(fileId)}/content`;
}

/** `code` as a Markdown code block (highlighted and sanitized as any answer's code is), its fence longer than any run
 * of backticks inside it. */
export function fenced(code: string, language: string): string {
  const longest = Math.max(0, ...Array.from(code.matchAll(/`+/g), (m) => m[0].length));
  const fence = "`".repeat(Math.max(3, longest + 1));
  return `${fence}${language}\n${code}\n${fence}`;
}
