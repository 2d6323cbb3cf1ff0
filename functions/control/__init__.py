"""The control plane: admission and limits, pool queues, overflow, brownout, replica breakers, canaries, SLO
observation, routing and config reload."""
