"""`python -m prenoise` (also what `torchrun -m prenoise` runs)."""

import sys

from prenoise.cli.commands import main

sys.exit(main())
