"""The second stage (fine-tuned MiniLM): its training loop, network, soups, ensembles and source sweeps."""
