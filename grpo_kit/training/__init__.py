"""Training: the recipes (presets) and the checks they pass before anything loads, TRL's GRPO trainer around them,
checkpoints and resuming, the callbacks that watch a run (held-out accuracy, reward-hacking and stale-weights
alarms), and experiment tracking.
"""
