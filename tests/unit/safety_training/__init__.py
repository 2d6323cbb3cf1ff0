"""Unit tests of safety training and its data sources (functions/offline/safety_training/)."""
