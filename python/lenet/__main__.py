"""python -m lenet: the same as lenet-cli."""

import sys

from .cli import main

sys.exit(main())
