/** Small persisted UI preferences (never secrets: the API key is never stored anywhere). */

const MODEL_KEY = "fleetchat.model";

export function savedModel(): string | null {
  try {
    return localStorage.getItem(MODEL_KEY);
  } catch {
    return null;
  }
}

export function saveModel(model: string): void {
  try {
    localStorage.setItem(MODEL_KEY, model);
  } catch {
    /* ignore */
  }
}

/** The model to preselect: the saved one if still allowed, else "flagship", else the last (best) listed. */
export function pickModel(available: string[], saved: string | null = savedModel()): string {
  if (saved && available.includes(saved)) return saved;
  if (available.includes("flagship")) return "flagship";
  return available[available.length - 1] ?? "";
}
