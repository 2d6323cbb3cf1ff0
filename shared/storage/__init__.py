"""Storage: the protocols in `base`, one module per backend beside it."""
