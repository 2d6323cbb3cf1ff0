"""Where eval runs go and how they read: the reports store, history, HTML report, plots, console, Prometheus."""
