"""The benchmark's and the eval harness's phases against real stacks."""
