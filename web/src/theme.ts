/** Light/dark theme: follows prefers-color-scheme until the user picks one (persisted in localStorage). */

export type Theme = "light" | "dark";
const KEY = "fleetchat.theme";

function storedTheme(): Theme | null {
  try {
    const value = localStorage.getItem(KEY);
    return value === "dark" || value === "light" ? value : null;
  } catch {
    return null;
  }
}

function systemTheme(): Theme {
  return typeof matchMedia === "function" && matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

export function currentTheme(): Theme {
  const value = document.documentElement.dataset.theme;
  return value === "dark" ? "dark" : "light";
}

const listeners = new Set<(theme: Theme) => void>();

/** Be told when the theme changes (toggle, or the system setting while the user has not chosen). */
export function onThemeChange(listener: (theme: Theme) => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

function apply(theme: Theme): void {
  document.documentElement.dataset.theme = theme;
  listeners.forEach((listener) => listener(theme));
  const meta = document.querySelector('meta[name="color-scheme"]');
  if (meta) meta.setAttribute("content", theme);
}

/** Set the initial theme and keep following the system setting while the user has not chosen. */
export function initTheme(): void {
  apply(storedTheme() ?? systemTheme());
  if (typeof matchMedia === "function") {
    const query = matchMedia("(prefers-color-scheme: dark)");
    const follow = () => {
      if (!storedTheme()) apply(systemTheme());
    };
    query.addEventListener?.("change", follow);
  }
}

export function setTheme(theme: Theme): void {
  apply(theme);
  try {
    localStorage.setItem(KEY, theme);
  } catch {
    /* storage unavailable: the choice lasts for this page */
  }
}

export function toggleTheme(): Theme {
  const next: Theme = currentTheme() === "dark" ? "light" : "dark";
  setTheme(next);
  return next;
}
