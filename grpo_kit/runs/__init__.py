"""One experiment: its spec (resolved and checked once), its folder, the train pipeline, and the measurements before
and after training that pair with each other.
"""
