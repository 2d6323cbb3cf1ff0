"""Weight interpolation between two fine-tunes of the second stage that start from the same MiniLM weights (a soup
across data mixes, as WiSE-FT interpolates a fine-tune with its starting point): numpy and torch only.

The result keeps the run settings of the first file (the run whose split `train --intent-weights` calibrates it on)
and records the second under "interpolated". Run: `python -m functions.offline.safety_training.intent.intent_soup A.pt
B.pt
--weight-of-b 0.5 --out SOUP.pt`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def interpolate(a: Path, b: Path, weight_of_b: float, out: Path) -> dict[str, Any]:
    """Save (1 - w) * A + w * B (floating-point tensors, in float32; integer buffers from A); the saved settings."""
    import torch

    if not 0.0 <= weight_of_b <= 1.0:
        raise ValueError(f"the weight of B must be within [0, 1], not {weight_of_b}")
    first = torch.load(a, map_location="cpu", weights_only=True)
    second = torch.load(b, map_location="cpu", weights_only=True)
    if first["state_dict"].keys() != second["state_dict"].keys():
        raise ValueError(f"{a} and {b} are not the same network")
    state = {
        name: (1 - weight_of_b) * value.float() + weight_of_b * second["state_dict"][name].float()
        if value.is_floating_point()
        else value
        for name, value in first["state_dict"].items()
    }
    settings = first["settings"] | {"interpolated": {"with": second["settings"], "weight": weight_of_b}}
    torch.save({"state_dict": state, "settings": settings}, out)
    return settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="weights whose run settings the soup keeps")
    parser.add_argument("b", type=Path, help="weights mixed in")
    parser.add_argument("--weight-of-b", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    print(json.dumps(interpolate(args.a, args.b, args.weight_of_b, args.out))[:400])


if __name__ == "__main__":
    main()
