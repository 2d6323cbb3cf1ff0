"""The second stage's network at training time (torch): MiniLM, mean pooling, a harmful logit and category logits.
Exported to ONNX with probabilities as its outputs."""

from __future__ import annotations

import torch


class IntentNet(torch.nn.Module):
    def __init__(self, base: torch.nn.Module, classes: int) -> None:
        super().__init__()
        self.base = base
        self.dropout = torch.nn.Dropout(0.1)
        self.harmful = torch.nn.Linear(base.config.hidden_size, 1)
        self.categories = torch.nn.Linear(base.config.hidden_size, classes)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(harmful logit [batch], category logits [batch, classes]). Only the block decision tunes the encoder:
        the category head reads the pooled vector detached, as a probe."""
        hidden = self.base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = self.dropout((hidden * weights).sum(1) / weights.sum(1))
        return self.harmful(pooled).squeeze(-1), self.categories(pooled.detach())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What ships: P(harmful) and the category distribution."""
        harmful, categories = self.logits(input_ids, attention_mask)
        return torch.sigmoid(harmful), torch.softmax(categories, dim=-1)
