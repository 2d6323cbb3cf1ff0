/** Service notices from the last answer's headers: brownout (shortened answers) and model fallback. Never silent. */
import type { BannerState } from "../hooks/useChat";
import { CloseIcon } from "./icons";

interface Props {
  banner: BannerState;
  onDismiss(): void;
}

export function Banner({ banner, onDismiss }: Props) {
  return (
    <div class="banner" data-testid="banner" role="status">
      <div class="banner-lines">
        {banner.fallback && (
          <p>
            Answered by <strong>{banner.fallback.used}</strong> because <strong>{banner.fallback.requested}</strong> is
            busy or unavailable
          </p>
        )}
        {banner.brownout && <p>Service is under heavy load: answers are shortened</p>}
      </div>
      <button type="button" class="icon-btn small" aria-label="Dismiss notice" onClick={onDismiss}>
        <CloseIcon />
      </button>
    </div>
  );
}
