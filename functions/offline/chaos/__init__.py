"""`fleetchat chaos`: a bounded run of a standard load generator (aiperf, unmodified) through a local fleet's load
balancer while a gateway and a worker are killed and the stores are briefly unavailable; then every request's books
are audited and a report with a timeline plot is written (docs/chaos.md)."""
