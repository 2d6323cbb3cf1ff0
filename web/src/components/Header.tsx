/** Top bar: mobile menu, model select + tier badge, export links, files, custom instructions, usage, theme toggle,
 * sign out. */
import { useEffect, useState } from "preact/hooks";
import { exportUrl } from "../api";
import { currentTheme, onThemeChange, toggleTheme, type Theme } from "../theme";
import { ChartIcon, DownloadIcon, FileIcon, LogoutIcon, MenuIcon, MoonIcon, ShareIcon, SlidersIcon, SunIcon } from "./icons";

const EXPORTS = [
  { format: "markdown", extension: "md", label: "Markdown", short: "MD" },
  { format: "json", extension: "json", label: "JSON", short: "JSON" },
] as const;

interface Props {
  models: string[];
  model: string;
  onModel(model: string): void;
  tier: string;
  exportId: string | null;
  sidebarOpen: boolean;
  onMenu(): void;
  onUsage(): void;
  onFiles(): void;
  onInstructions(): void;
  /** Open the share-link dialog of the open chat (shown when it is stored: `exportId`). */
  onShare(): void;
  onSignOut(): void;
  modelDisabled: boolean;
}

export function Header(props: Props) {
  const [theme, setTheme] = useState<Theme>(currentTheme());
  useEffect(() => onThemeChange(setTheme), []);
  const nextTheme = theme === "dark" ? "light" : "dark";
  const exportId = props.exportId;
  return (
    <header class="topbar">
      <button
        type="button"
        class="icon-btn menu-btn"
        data-testid="menu"
        aria-label={props.sidebarOpen ? "Close conversations menu" : "Open conversations menu"}
        aria-expanded={props.sidebarOpen ? "true" : "false"}
        aria-controls="sidebar"
        onClick={props.onMenu}
      >
        <MenuIcon />
      </button>
      <div class="model-picker">
        <label for="model-select" class="sr-only">
          Model
        </label>
        <select
          id="model-select"
          data-testid="model"
          class="model-select"
          value={props.model}
          disabled={props.modelDisabled}
          onChange={(e) => props.onModel((e.currentTarget as HTMLSelectElement).value)}
        >
          {props.models.length === 0 && <option value="">No models</option>}
          {props.models.map((id) => (
            <option key={id} value={id}>
              {id}
            </option>
          ))}
        </select>
        {props.tier && (
          <span class={`tier tier-${props.tier.replace(/[^a-z]/gi, "")}`} data-testid="tier" title="Your plan">
            {props.tier}
          </span>
        )}
      </div>
      <div class="topbar-actions">
        {exportId && (
          <div class="export-links" role="group" aria-label="Export this conversation">
            {EXPORTS.map(({ format, extension, label, short }) => (
              <a
                key={format}
                class="icon-btn export-link"
                data-testid={`export-${format}`}
                href={exportUrl(exportId, format)}
                download={`${exportId}.${extension}`}
                aria-label={`Export as ${label}`}
                title={`Export as ${label}`}
              >
                <DownloadIcon />
                <span class="btn-text">{short}</span>
              </a>
            ))}
            <button
              type="button"
              class="icon-btn"
              data-testid="share-open"
              aria-label="Share this chat"
              title="Share"
              onClick={props.onShare}
            >
              <ShareIcon />
            </button>
          </div>
        )}
        <button
          type="button"
          class="icon-btn"
          data-testid="files-open"
          aria-label="Your files"
          title="Files"
          onClick={props.onFiles}
        >
          <FileIcon />
        </button>
        <button
          type="button"
          class="icon-btn"
          data-testid="instructions-open"
          aria-label="Custom instructions and memory"
          title="Custom instructions and memory"
          onClick={props.onInstructions}
        >
          <SlidersIcon />
        </button>
        <button
          type="button"
          class="icon-btn"
          data-testid="usage-open"
          aria-label="Usage this month"
          title="Usage"
          onClick={props.onUsage}
        >
          <ChartIcon />
        </button>
        <button
          type="button"
          class="icon-btn"
          data-testid="theme-toggle"
          aria-label={`Switch to ${nextTheme} theme`}
          title={`Switch to ${nextTheme} theme`}
          onClick={() => toggleTheme()}
        >
          {theme === "dark" ? <SunIcon /> : <MoonIcon />}
        </button>
        <button
          type="button"
          class="icon-btn"
          data-testid="sign-out"
          aria-label="Sign out"
          title="Sign out"
          onClick={props.onSignOut}
        >
          <LogoutIcon />
        </button>
      </div>
    </header>
  );
}
