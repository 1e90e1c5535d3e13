"""What the course trains, and with what: the model, its data, and its checkpoints.

  tiny         the tiny MLP in plain JAX, its synthetic data set and host-local loader (07-09)
  nnx_model    the same model as a Flax NNX module, with its Optax optimizer (10-11)
  nnx_dropout  notebook 17's NNX model with dropout and per-device state, and its nnx.pmap step body
  data         Grain input pipelines: each host's rows of every global batch, evaluation padding
  checkpoints  Orbax checkpoints of a sharded train state, and the checks before a resume
"""
