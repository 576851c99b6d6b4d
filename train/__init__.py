"""AMP training: data, the loss-scaled step, checkpoints and the msrun launcher."""
