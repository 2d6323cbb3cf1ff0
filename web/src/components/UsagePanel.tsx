/** Usage this period (GET /v1/usage): total requests and tokens, and the same per model. */
import { useEffect, useState } from "preact/hooks";
import { api } from "../api";
import type { TokenTotals, UsageObject } from "../types";
import { CloseIcon } from "./icons";
import { Modal } from "./Modal";

interface Props {
  onClose(): void;
}

function day(value: string | number | undefined): string {
  if (value === undefined || value === null || value === "") return "";
  const date = typeof value === "number" ? new Date(value * (value < 1e12 ? 1000 : 1)) : new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toISOString().slice(0, 10);
}

const n = (value: number | undefined) => String(value ?? 0);

const ROWS: Array<[keyof TokenTotals, string]> = [
  ["requests", "Requests"],
  ["prompt_tokens", "Prompt tokens"],
  ["completion_tokens", "Completion tokens"],
  ["cached_tokens", "Cached tokens"],
];

export function UsagePanel({ onClose }: Props) {
  const [usage, setUsage] = useState<UsageObject | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let live = true;
    api
      .usage()
      .then((u) => live && setUsage(u))
      .catch((err: Error) => live && setError(err.message || "Could not load usage."));
    return () => {
      live = false;
    };
  }, []);

  const models = usage ? Object.entries(usage.by_model ?? {}) : [];
  return (
    <Modal labelledBy="usage-title" testId="usage" onClose={onClose} class="usage-dialog">
      <div class="dialog-head">
        <h2 id="usage-title">Usage</h2>
        <button type="button" class="icon-btn small" aria-label="Close usage" data-testid="usage-close" onClick={onClose}>
          <CloseIcon />
        </button>
      </div>
      {error && (
        <p class="form-error" role="alert">
          {error}
        </p>
      )}
      {!usage && !error && <p role="status">Loading…</p>}
      {usage && (
        <>
          <p class="usage-period">
            {day(usage.start)} – {day(usage.end)}
          </p>
          <dl class="usage-totals">
            {ROWS.map(([key, label]) => (
              <div class="usage-stat" key={key}>
                <dt>{label}</dt>
                <dd data-testid={`usage-${key.replace("_tokens", "")}`}>{n(usage.totals?.[key])}</dd>
              </div>
            ))}
          </dl>
          {models.length > 0 && (
            <table class="usage-table">
              <caption class="sr-only">Usage by model</caption>
              <thead>
                <tr>
                  <th scope="col">Model</th>
                  {ROWS.map(([key, label]) => (
                    <th scope="col" key={key}>
                      {label.replace(" tokens", "")}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {models.map(([model, totals]) => (
                  <tr key={model}>
                    <th scope="row">{model}</th>
                    {ROWS.map(([key]) => (
                      <td key={key}>{n(totals?.[key])}</td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
    </Modal>
  );
}
