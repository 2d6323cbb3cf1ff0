"""The gateway's Prometheus metrics: requests and outcomes, the control loop, failover, HTTP responses."""
