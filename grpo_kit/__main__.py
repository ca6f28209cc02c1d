import sys

from grpo_kit.cli import main

if __name__ == "__main__":  # a spawned worker (grpo_kit.verify) imports this module without running it
    sys.exit(main())
