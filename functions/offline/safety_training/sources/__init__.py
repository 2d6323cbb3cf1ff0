"""The public, licensed data sources the safety classifier learns from and is measured on, and their builder."""
