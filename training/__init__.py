"""Training-side extensions of verl: CPU mode, the CPU rollout, the Bradley-Terry trainer, export."""
