"""`python -m prenoise` (also what `torchrun -m prenoise` runs)."""

import sys

from prenoise.cli import main

sys.exit(main())
