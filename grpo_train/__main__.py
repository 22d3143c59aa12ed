"""`python -m grpo_train --config F` is `grpo-train --config F` (handy under torchrun / deepspeed)."""

import sys

from grpo_train.cli import train_main

sys.exit(train_main())
