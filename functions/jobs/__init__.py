"""Scheduled jobs (retention sweep, evals): plain functions, run by the CLI locally and by Modal schedules deployed."""
