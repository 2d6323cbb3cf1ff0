"""Unit tests of the safety pipeline at run time (functions/safety/)."""
