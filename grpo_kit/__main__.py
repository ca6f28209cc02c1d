import sys

from grpo_kit.cli import main

sys.exit(main())
