"""Unit tests of what deploys: the Modal app, Terraform, ops rules, the lock, vLLM options."""
