"""Unit tests of the public data sources safety training reads (offline/safety_training/sources/)."""
