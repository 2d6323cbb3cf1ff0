/** The code interpreter's runs behind an answer, above its text: each run's code, its output (or why it has none),
 * the files it wrote as download links; a running one says so, a timed-out one says it was stopped. */
import { formatBytes } from "../attachments";
import { fenced, fileUrl, runCode, runError, runLabel, runOutput, toolTitle } from "../toolRuns";
import type { ServerToolRun } from "../types";
import { CodeIcon, DownloadIcon } from "./icons";
import { Markdown } from "./Markdown";

function Run({ run }: { run: ServerToolRun }) {
  const code = runCode(run);
  const output = runOutput(run);
  const error = runError(run);
  const running = run.status === "running";
  const truncated = run.result?.output_truncated === true;
  const dropped = Array.isArray(run.result?.files_dropped) ? (run.result?.files_dropped as string[]) : [];
  return (
    <details class={`tool-run status-${run.status}`} data-testid="tool-run" data-status={run.status} open>
      <summary>
        <CodeIcon class="tool-run-icon" />
        <span class="tool-run-title">{toolTitle(run.tool)}</span>
        <span class="tool-run-label" data-testid="tool-run-label">
          {running && <span class="spinner" aria-hidden="true" />}
          {runLabel(run)}
        </span>
      </summary>
      {code && (
        <div class="tool-run-code" data-testid="tool-run-code">
          <Markdown text={fenced(code, run.tool === "python" ? "python" : "")} />
        </div>
      )}
      {!running && (output || error) && (
        <div class="tool-run-output" data-testid="tool-run-output">
          <div class="tool-run-caption">Output</div>
          {output && <pre>{output}</pre>}
          {truncated && <p class="tool-run-note">The output was cut at the size limit.</p>}
          {error && <p class="tool-run-note tool-run-error">{error}</p>}
        </div>
      )}
      {run.content_filtered && (
        <p class="tool-run-note" data-testid="tool-run-filtered">
          Part of this run was kept back by the safety filter.
        </p>
      )}
      {(run.files?.length ?? 0) > 0 && (
        <ul class="tool-run-files">
          {run.files!.map((file) => (
            <li key={file.file_id}>
              <a href={fileUrl(file.file_id)} download={file.filename} data-testid="tool-run-file">
                <DownloadIcon />
                <span>{file.filename}</span>
              </a>
              <span class="tool-run-size">{formatBytes(file.bytes)}</span>
            </li>
          ))}
        </ul>
      )}
      {dropped.length > 0 && <p class="tool-run-note">Not kept: {dropped.join("; ")}</p>}
    </details>
  );
}

export function ToolRuns({ runs }: { runs?: ServerToolRun[] }) {
  if (!runs || runs.length === 0) return null;
  return (
    <div class="tool-runs" data-testid="tool-runs">
      {runs.map((run) => (
        <Run key={run.tool_call_id} run={run} />
      ))}
    </div>
  );
}
