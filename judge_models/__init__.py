"""The model code that training and serving share: the scalar judge's forward passes and reward (scalar_model),
packed rows that compute a shared prompt once (packing), and padded batches by length (padding). torch and
transformers; nothing here knows HTTP, verl or a recipe."""
