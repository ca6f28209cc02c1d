import gc
import sys

from grpo_kit.cli import main

if __name__ == "__main__":  # a spawned worker (grpo_kit.verify) imports this module without running it
    status = main()
    # What is garbage now is collected (its finalizers run, its files close); the rest lives until the process ends,
    # and frozen, CPython's teardown skips it in the cycle collections it runs while clearing the modules: over the
    # objects torch, transformers and TRL made, those took about 1.5 CPU seconds a process.
    gc.collect()
    gc.freeze()
    sys.exit(status)
