/** Small persisted UI preferences (never secrets: the API key is never stored anywhere). */

const MODEL_KEY = "fleetchat.model";
const CODE_KEY = "fleetchat.code";

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

/** Whether the code interpreter is switched on (off until the user turns it on). */
export function savedCodeInterpreter(): boolean {
  try {
    return localStorage.getItem(CODE_KEY) === "on";
  } catch {
    return false;
  }
}

export function saveCodeInterpreter(on: boolean): void {
  try {
    localStorage.setItem(CODE_KEY, on ? "on" : "off");
  } catch {
    /* ignore */
  }
}
