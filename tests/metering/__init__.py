"""Tests of the meter exporter and reconciliation against SQLite stores and a real-HTTP Stripe fake."""
