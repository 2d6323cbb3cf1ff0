"""The second stage's model soup: several fine-tunes' weights averaged into one net of the same shape."""

from __future__ import annotations

import torch

from functions.offline.safety_training.intent.intent_fine_tune import average_weights


class _Tiny(torch.nn.Module):
    def __init__(self, fill: float, steps: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        torch.nn.init.constant_(self.linear.weight, fill)
        torch.nn.init.constant_(self.linear.bias, -fill)
        self.register_buffer("position_ids", torch.arange(4) + steps)


def test_floating_point_weights_are_averaged_and_integer_buffers_kept() -> None:
    nets = [_Tiny(1.0, 0), _Tiny(2.0, 10), _Tiny(6.0, 20)]
    soup = average_weights(nets)
    assert soup is nets[0]
    assert torch.equal(soup.linear.weight, torch.full((2, 3), 3.0))
    assert torch.equal(soup.linear.bias, torch.full((2,), -3.0))
    assert torch.equal(soup.position_ids, torch.arange(4)), "an integer buffer is not averaged"
    assert soup.position_ids.dtype == torch.int64


def test_a_soup_of_one_is_that_net() -> None:
    net = _Tiny(0.5, 0)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    soup = average_weights([net])
    assert all(torch.equal(before[k], v) for k, v in soup.state_dict().items())
