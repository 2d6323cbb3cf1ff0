"""Stripe Billing metering: the meter exporter (ledger -> meter events) and its reconciliation."""
