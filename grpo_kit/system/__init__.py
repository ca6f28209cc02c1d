"""What the kit needs from the operating system, below every wing: logging, progress of long phases, files written
whole, child processes.

Nothing here knows about tasks, models or training.
"""
