"""Unit tests of the control plane (functions/control/) and the spooled writer."""
