"""What the kit needs from the operating system, below every wing: logging, files written whole, child processes.

Nothing here knows about tasks, models or training.
"""
